"""verl's distillation loss on a worker's first call, the first of the two situations of `test_distillation_loss.py`
(whose docstring states the invariant and what the vanilla tree gives): measured in one child of the fork server
(`patchset.plumbing.children`), a process that imported torch and verl's modules and computed nothing, so nothing of
an earlier test is around. A module of its own so that, one file per worker, it runs beside the other half."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from distillation_cases import Measurement, all_cases, measure_first_calls
from distillation_checks import check_measurement, record_measurement

from patchset.plumbing.children import run_children

FIRST_CALLS_DEADLINE_S = 300  # every first-call case: a few seconds of CPU


def _measure_into(cases: list, result_file: str) -> None:
    """The child's work: `measure_first_calls`, its result pickled into ``result_file``."""
    Path(result_file).write_bytes(pickle.dumps(measure_first_calls(cases)))


@pytest.fixture(scope="module")
def first_calls(
    request: pytest.FixtureRequest, verl_distillation_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Measurement]:
    """The first-call cases this session runs (all, or the sample the conftest kept), measured in one child process
    (nothing of this process's tests in it, fresh workers per case)."""
    cases = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "function", None) is test_distillation_gradient_on_a_workers_first_call_invariant_to_the_split
    ]
    result_file = tmp_path_factory.mktemp("first-calls") / "result.pickle"
    (code,) = run_children(_measure_into, [(cases, str(result_file))], FIRST_CALLS_DEADLINE_S, "first-call cases")
    assert code == 0 and result_file.exists(), f"the child measuring the first calls exited with code {code}"
    files, measurements = pickle.loads(result_file.read_bytes())
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(verl_distillation_tree), (
            f"the child process imported {name} from {file}"
        )
    return {measurement.case: measurement for measurement in measurements}


@pytest.mark.parametrize("case", all_cases("first call"), ids=str)
def test_distillation_gradient_on_a_workers_first_call_invariant_to_the_split(expect, baseline_dir, first_calls, case):
    measured = first_calls[str(case)]
    check_measurement(expect, case, measured)
    record_measurement(baseline_dir, expect, case, measured)
