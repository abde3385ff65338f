"""Imported last by a fork server whose children build verl's engine: work every rank would repeat, done once.

- verl's `get_hf_auto_model_class` tests the model config against transformers' image-text-to-text mapping on every
  engine build, and that mapping's ``keys()`` imports every model class it names (about a hundred modules, 0.7 s of
  CPU in each rank, measured). Here the server imports them; every rank forked after finds them in ``sys.modules``.
- `freeze_collector` then moves everything the server has imported out of the collector's view (why: its docstring);
  a rank's collections also leave the pages it shares with the server unwritten.

Nothing here touches the loss path, the trees under test or a random generator.
"""

from __future__ import annotations

from transformers import AutoModelForImageTextToText

from engine_harness.adapt import freeze_collector

AutoModelForImageTextToText._model_mapping.keys()  # imports the model classes: see above
freeze_collector()
