"""Imported last by the fork server of the legacy actor's ranks (`legacy_sim.RANK_PRELOAD`): Trinity's legacy worker
and actor modules, imported there once instead of in every rank.

Importing them (``trinity.trainer``, ``verl_legacy.fsdp_workers`` and ``verl_legacy.dp_actor``) was most of a rank's
CPU: the two legacy modules beside verl 0.7.1 (six ranks) took 23.3 s of CPU with every rank importing them, 13.2 with
this (one cgroup each, back to back). ``dp_actor`` names its logger at import as a Ray actor's
without a name, which Trinity allows only once an actor logger exists: it is made first, as each rank makes it
(`legacy_sim.data_parallel_rank`, which then gets the same one). Nothing here runs a loss or draws a random number.
"""

from __future__ import annotations

from legacy_sim import RANK_LOGGER, worker_module
from trinity.utils.log import get_logger

get_logger(RANK_LOGGER, in_ray_actor=True)
worker_module()
from trinity.trainer.verl_legacy import dp_actor  # noqa: E402, F401
