"""The code of the Python scripts of ``scripts/``: each ``scripts/NAME.py`` is a thin entry that runs one command here.

- `gpu_proof` (``scripts/gpu_proof.py``): verl's real FSDP2 engine trains each fixed loss, vanilla against patched,
  on the user's GPUs (or CPU);
- `bench.loss_call` (``scripts/bench.py``): what the patches cost in one loss call, patched against vanilla, and
  (``--pre-pass``, `bench.pre_pass`) the no-grad forward before a later update;
- `bench.startup` (``scripts/bench_startup.py``): what the overlays cost at interpreter start;
- `e2e_plot` (``scripts/plot.py``): the end-to-end engine test's grad_norm figure;
- `lock` (``scripts/lock.py``): regenerates requirements/lock.txt.

Each command's ``main(argv) -> int`` starts through `patchset.cli.startup` (one ``error:`` line and the documented
exit status for whatever ends it, bad input included: `patchset.plumbing.errors.BadInput`); its settings are
dataclasses, and nothing is read from the machine at import time. It runs from the checkout (the repository root on
``sys.path``, which each thin entry appends: the one place that touches the path) and is not in the project's
wheel. It may import `patchset` and `engine_harness`; nothing imports it but the entries and the tests
(tests/scripts/test_layers.py).
"""
