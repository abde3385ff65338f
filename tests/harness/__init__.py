"""Helpers only the tests use, over `engine_harness`: verl's engine steps without a model (`sim`), the real
``TrainingWorker`` on a stand-in engine and its ``init_model`` (`training_worker`, `actor_init`), Trinity's configs
and installed losses (`trinity_configs`), a loss run on gloo ranks, the mini-batch selections and means as the patched
worker makes them, and a self-normalizing Trinity loss. Imported as ``harness``, with ``tests/`` on the path (an
installed sdist may bring a top-level ``tests`` package of its own), by the regression suite and the overlay cases;
its modules import each other relatively; never by the tooling, the proof or the bench.
"""
