"""What the fix costs (``python -m patchset bench``): one loss call (`loss_call`), the pre-pass before a later update
(`pre_pass`, ``--pre-pass``), the overlays' start-up (`startup`, ``--startup``), patched against vanilla."""
