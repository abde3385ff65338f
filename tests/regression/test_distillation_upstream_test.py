"""verl 0006: the tree carries an upstream-style CPU test of the distillation fix (0002, upstream's #7225), and it
passes there.

#7225 added no test, so nothing in verl's own tree stops the fix from regressing; 0006 adds one in
``tests/workers/``, where main keeps its distillation tests. On the vanilla trees the file is missing (the teeth);
on the patched trees (0.8.0 with 0002, 0.9.x with upstream's fix) it runs with the tree's own verl and passes.
"""

from __future__ import annotations

from pathlib import Path

from conftest import UpstreamPytest

UPSTREAM_TEST = "tests/workers/test_distillation_loss_global_normalization_on_cpu.py"
CASES = 40  # every loss_agg_mode, both branches, a first call and a later mini-batch


def test_distillation_fix_has_a_passing_test_in_verl_tree(
    verl_distillation_tree: Path, expect: str, upstream_pytest: UpstreamPytest
) -> None:
    path = verl_distillation_tree / UPSTREAM_TEST
    if expect == "bug":
        assert not path.is_file(), f"vanilla {verl_distillation_tree} already has {UPSTREAM_TEST}"
        return
    assert path.is_file(), f"{verl_distillation_tree} lacks {UPSTREAM_TEST}, which verl 0006 adds"
    code, output = upstream_pytest(verl_distillation_tree, (verl_distillation_tree,), [UPSTREAM_TEST])
    assert code == 0 and f"{CASES} passed" in output, output[-5000:]
