"""The test environment is installed with uv, which reads no pip configuration: where pip would find the CPU build
of torch (a find-links folder, an index), uv must be told, or it fetches a CUDA build of several GB."""

from __future__ import annotations

import sys
from pathlib import Path

from patchset.testenv.venv import pip_sources


def test_uv_gets_pips_sources_with_the_variables_over_the_files(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nfind-links = /from/file\nextra-index-url = file:///one file:///two\n"
        "[install]\nindex-url = https://mirror.invalid/simple\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/variable")

    options = pip_sources(sys.executable)

    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--find-links", "/from/variable") in pairs and ("--find-links", "/from/file") not in pairs
    assert ("--extra-index-url", "file:///one") in pairs and ("--extra-index-url", "file:///two") in pairs
    assert ("--index-url", "https://mirror.invalid/simple") in pairs
