"""The GPU proof (``python -m patchset proof``, ``scripts/gpu_proof.py``): verl's real FSDP2 engine, vanilla against
patched, on the user's hardware; and the end-to-end engine test's figure (`e2e_plot`, ``python -m patchset plot``).

- `prove`: the plan of a run and the report;
- `cases`: what is measured, what each tree should show, and one run's `Settings`, the same for both trees (plain
  data, handed to each tree's process; no torch, no verl: the main process reads it);
- `trees`: where each side's verl and Trinity-RFT come from, and the check that every rank imported them from there;
- `launch`: the main process's end of a tree's run: starts its process and reads what its ranks wrote;
- `side`: one tree's process (``python -m patchset.proof.side``): starts the ranks and gathers what they measured;
- `rank`: one rank: the engines, the data and the steps, with the trees' own verl and Trinity modules;
- `verdict`, `trajectory`: pass or fail per case, from the measurements and the training runs, and the tolerances;
- `report`: the tables and lines the user reads; `plots`: ``--plot``'s figures.

The main process imports neither torch nor verl; the trees' processes and ranks do.
"""
