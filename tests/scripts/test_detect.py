"""Detection reads only the tree's own files: verl by verl/version/version plus core_algos.py, Trinity-RFT by
``__version__`` in trinity/__init__.py plus trinity/trainer/verl/losses.py; anything else is refused."""

from __future__ import annotations

import pytest
from patchset_fakes import TRINITY_FILES, VERL_FILES, write_files

from patchset.plumbing.errors import BadInput
from patchset.upstreams.registry import Detected, detect


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (VERL_FILES, Detected(key="verl", label="verl", version="0.8.0")),
        ({**VERL_FILES, "verl/version/version": "  0.9.1\n\n"}, Detected(key="verl", label="verl", version="0.9.1")),
        (TRINITY_FILES, Detected(key="trinity", label="Trinity-RFT", version="0.6.0")),
        (
            {**TRINITY_FILES, "trinity/__init__.py": "'''Trinity.'''\n__version__ = '0.6.1rc1'\n"},
            Detected(key="trinity", label="Trinity-RFT", version="0.6.1rc1"),
        ),
    ],
    ids=["verl", "verl-whitespace", "trinity", "trinity-single-quotes"],
)
def test_detects_upstream_and_version_from_tree_files(tmp_path, files, expected):
    write_files(tmp_path, files)
    assert detect(tmp_path, "TREE") == expected


@pytest.mark.parametrize(
    "files",
    [
        {"README": "x"},
        {"verl/version/version": "0.8.0\n"},  # no core_algos.py
        {**TRINITY_FILES, "trinity/__init__.py": "# no version here\n"},
        {k: v for k, v in TRINITY_FILES.items() if not k.endswith("losses.py")},
    ],
    ids=["empty", "verl-without-core-algos", "trinity-without-version", "trinity-without-losses"],
)
def test_other_trees_are_refused_with_one_line(tmp_path, files):
    write_files(tmp_path, files)
    with pytest.raises(BadInput) as caught:
        detect(tmp_path, "TREE")
    assert str(caught.value) == (
        "TREE is not a verl or Trinity-RFT checkout (no verl/version/version or trinity/__init__.py)"
    )


def test_tree_holding_both_is_refused(tmp_path):
    write_files(tmp_path, {**VERL_FILES, **TRINITY_FILES})
    with pytest.raises(BadInput, match="holds both"):
        detect(tmp_path, "TREE")
