"""The GPU proof (``python -m patchset proof``, ``scripts/gpu_proof.py``): verl's real FSDP2 engine, vanilla against
patched, on the user's hardware; and the end-to-end engine test's figure (`e2e_plot`, ``python -m patchset plot``).

The main process (`prove`, with `cases`, `trees`, `launch`, `verdict`, `trajectory`, `report`) imports neither torch
nor verl; each tree's process (`side`) and its ranks (`rank`) do.
"""
