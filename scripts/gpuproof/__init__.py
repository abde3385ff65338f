"""The GPU proof (`scripts/gpu_proof.py`): verl's real FSDP2 engine, vanilla against patched, on the user's hardware.

- `cases`: what is measured and what each tree should show (no torch, no verl: the main process reads it);
- `verdict`: pass or fail per case, from the measurements, and the tolerances and why;
- `report`: the tables and lines the user reads;
- `side`: one tree's process (``python -m gpuproof.side``): starts the ranks and gathers what rank 0 measured;
- `rank`: one rank: the engines, the data and the steps, with the trees' own verl and Trinity modules.
"""
