"""The GPU proof (``python -m patchset proof``, ``scripts/gpu_proof.py``) and the end-to-end engine test's figure
(`e2e_plot`, ``python -m patchset plot``). The main process imports neither torch nor verl; each tree's process
(`side`) and its ranks (`rank`) do."""
