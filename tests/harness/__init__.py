"""Helpers only the tests use, over `engine_harness`: a loss run on gloo ranks, the mini-batch selections and means
as the patched worker makes them, and a self-normalizing Trinity loss. Imported from the repository root (the
regression suite's children and the overlay cases put it on the path), never by the tooling, the proof or the bench.
"""
