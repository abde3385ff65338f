"""The series file alone gives the order; each patch's subject and DEP-3 fields are read from its header; the
paths a patch touches are read from its file headers only (both sides of a rename, quoted names)."""

from __future__ import annotations

import pytest
from patchset_fakes import TRINITY_PATCH, VERL_PATCH_1, VERL_PATCH_2

from patchset.plumbing import patchtext
from patchset.plumbing.errors import BadInput
from patchset.series.model import load_series
from patchset.upstreams.pins import at_least, load_pins, release_key


def test_series_order_comes_from_series_file_not_the_folder(world):
    (world.patches / "verl" / "series").write_text(
        f"# reversed on purpose\n\n{VERL_PATCH_2}  # trailing\n{VERL_PATCH_1}\n"
    )
    (world.patches / "verl" / "9999-unlisted.patch").write_text("not listed, never read\n")

    series = load_series(world.patches, "verl")

    assert [p.name for p in series.patches] == [VERL_PATCH_2, VERL_PATCH_1]


def test_patch_header_gives_subject_and_dep3_fields(world):
    first, second = load_series(world.patches, "verl").patches

    assert first.subject == "[trainer] feat: add scale"
    assert first.fields == {"Forwarded": "no", "Bug": "https://example.invalid/1", "Last-Update": "2026-01-01"}
    assert first.files == ("tests/trainer/ppo/test_scale_on_cpu.py", "verl/trainer/ppo/core_algos.py")
    assert first.upstream_since is None
    assert second.subject == "[trainer] fix: scale by two"


def test_applied_upstream_field_gives_the_version(world):
    (patch,) = load_series(world.patches, "trinity").patches
    assert patch.name == TRINITY_PATCH
    assert patch.fields["Applied-Upstream"] == "0.7.0, https://example.invalid"
    assert patch.upstream_since == "0.7.0"


def test_long_subject_is_unfolded(world):
    patch = world.patches / "verl" / VERL_PATCH_1
    text = patch.read_text()
    assert "Subject: [PATCH 1/2] [trainer] feat: add scale\n" in text
    patch.write_text(text.replace("feat: add scale\n", "feat: add scale\n and more\n", 1))
    assert load_series(world.patches, "verl").patches[0].subject == "[trainer] feat: add scale and more"


def test_series_entry_escaping_the_folder_is_refused(world):
    (world.patches / "verl" / "series").write_text("../trinity/series\n")
    with pytest.raises(BadInput, match="must be a file inside"):
        load_series(world.patches, "verl")


def test_missing_series_file_is_refused(world):
    with pytest.raises(BadInput, match="series file"):
        load_series(world.patches, "nope")


RENAME_AND_QUOTED = """\
diff --git a/old name.txt b/new name.txt
similarity index 100%
rename from old name.txt
rename to new name.txt
diff --git "a/caf\\303\\251.py" "b/caf\\303\\251.py"
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- "a/caf\\303\\251.py"
+++ "b/caf\\303\\251.py"
@@ -1,2 +1,2 @@
--- not a header, a removed line
+x
 y
diff --git a/gone.py b/gone.py
deleted file mode 100644
index 3333333333333333333333333333333333333333..0000000000000000000000000000000000000000
--- a/gone.py
+++ /dev/null
@@ -3,1 +0,0 @@
-z
"""


def test_patch_paths_reads_renames_quoted_names_and_deletions():
    assert patchtext.patch_paths(RENAME_AND_QUOTED) == ["old name.txt", "new name.txt", "café.py", "gone.py"]


def test_find_hunk_names_the_hunk_git_reported():
    assert patchtext.find_hunk(RENAME_AND_QUOTED, "gone.py", 3) == "@@ -3,1 +0,0 @@"
    assert patchtext.find_hunk(RENAME_AND_QUOTED, "café.py", 1) == "@@ -1,2 +1,2 @@"
    assert patchtext.find_hunk(RENAME_AND_QUOTED, "gone.py", 1) is None


@pytest.mark.parametrize(
    ("version", "minimum", "expected"),
    [("0.9.0", "0.9.0", True), ("0.9.1", "0.9", True), ("0.10.0", "0.9.0", True), ("0.8.0", "0.9.0", False),
     ("0.9.0rc1", "0.9.0", False), ("0.9.0.dev0", "0.9.0", False), ("v0.9.0", "0.9.0", True)],
)  # fmt: skip
def test_version_ordering(version, minimum, expected):
    assert at_least(version, minimum) is expected


def test_unparsable_version_sorts_first():
    assert release_key("main") < release_key("0.0.1")


def test_upstreams_toml_of_the_repository_loads():
    from patchset.plumbing.paths import REPO_ROOT

    pins = load_pins(REPO_ROOT / "patches" / "upstreams.toml")
    assert [p.label for p in pins.defaults()] == ["verl 0.8.0", "trinity-rft 0.6.0"]
    assert pins.versions("verl") == ["0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
    # verl 0.7.1 is a target of its own series, and Trinity is also tested (on its legacy path) beside it as released
    assert [p.label for p in pins.companions("verl", of="trinity")] == ["verl 0.7.1"]
    assert {p.version: p.series for p in pins.for_key("verl")}["0.7.1"] == "verl-0.7"


def test_target_false_only_on_a_companion_pin(world):
    toml = world.patches / "upstreams.toml"
    toml.write_text(toml.read_text().replace("default = false", "default = false\ntarget = false", 1))
    with pytest.raises(BadInput, match="target must be true or false, and false only on a companion_for pin"):
        load_pins(toml)


def test_companion_pin_must_not_be_the_default(world):
    toml = world.patches / "upstreams.toml"
    toml.write_text(toml.read_text().replace("default = true", 'default = true\ncompanion_for = "trinity"', 1))
    with pytest.raises(BadInput, match="companion_for must name an upstream key, on a pin that is not the default"):
        load_pins(toml)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('sdist_sha256 = "0', 'sdist_sha256 = "Z', 1), "64 lowercase hex"),
        (lambda t: t.replace('version = "0.9.0"', 'version = "0.8.0"'), "pinned twice"),
        (lambda t: t.replace("default = false", "default = true", 1), "second default"),
        (lambda t: t.replace('tag = "v0.8.0"\n', ""), "lacks tag"),
        (lambda t: t + "[[upstream\n", "cannot read"),
    ],
    ids=["bad-sha", "duplicate", "two-defaults", "missing-field", "bad-toml"],
)
def test_bad_upstreams_toml_is_refused(world, edit, message):
    toml = world.patches / "upstreams.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(BadInput, match=message):
        load_pins(toml)
