"""verl's distillation loss on a worker's first call, the first of the two situations of `test_distillation_loss.py`
(whose docstring states the invariant and what the vanilla tree gives): measured in one spawned process, so nothing
of an earlier test is around. A module of its own so that, one file per worker, it runs beside the other half."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from distillation_cases import Measurement, all_cases, measure_first_calls
from distillation_checks import check_measurement, record_measurement


@pytest.fixture(scope="module")
def first_calls(request: pytest.FixtureRequest, verl_distillation_tree: Path) -> dict[str, Measurement]:
    """The first-call cases this session runs (all, or the sample the conftest kept), measured in one spawned
    process (fresh interpreter, fresh workers per case)."""
    cases = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "function", None) is test_distillation_gradient_on_a_workers_first_call_invariant_to_the_split
    ]
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        files, measurements = pool.submit(measure_first_calls, cases).result()
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(verl_distillation_tree), (
            f"the spawned process imported {name} from {file}"
        )
    return {measurement.case: measurement for measurement in measurements}


@pytest.mark.parametrize("case", all_cases("first call"), ids=str)
def test_distillation_gradient_on_a_workers_first_call_invariant_to_the_split(expect, baseline_dir, first_calls, case):
    measured = first_calls[str(case)]
    check_measurement(expect, case, measured)
    record_measurement(baseline_dir, expect, case, measured)
