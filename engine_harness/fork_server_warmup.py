"""Imported last by a fork server whose children build verl's engine: work every rank would repeat, done once.
Nothing here touches the loss path, the trees under test or a random generator."""

from __future__ import annotations

from transformers import AutoModelForImageTextToText

from engine_harness.adapt import freeze_collector

# verl's `get_hf_auto_model_class` tests every engine build's config against this mapping, whose keys() import every
# model class it names (about a hundred modules, 0.7 s of CPU a rank, measured): the ranks forked after find them here
AutoModelForImageTextToText._model_mapping.keys()
# what the server imported, out of the collector's view (why: its docstring); a rank's collections then also leave
# the pages it shares with the server unwritten
freeze_collector()
