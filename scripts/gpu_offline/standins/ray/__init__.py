"""OFFLINE GPU MACHINES ONLY: a stand-in for `ray`, NOT the real package (see scripts/gpu_offline/README.md): every
attribute is a placeholder that raises if called. Never put this folder on the path of a real training run."""

from _standin import install

install("ray", globals())
