"""Imported last by a fork server whose children build verl's engine: work every rank would repeat, done once.

- verl's `get_hf_auto_model_class` tests the model config against transformers' image-text-to-text mapping on every
  engine build, and that mapping's ``keys()`` imports every model class it names (about a hundred modules, 0.7 s of
  CPU in each rank, measured). Here the server imports them; every rank forked after finds them in ``sys.modules``.
- `gc.freeze` then moves everything the server has imported out of the collector's view: the engine's ``gc.collect()``
  calls (twice a step, and during each build) no longer walk torch's, transformers' and verl's objects in every rank,
  and a rank's collections do not write to the pages it shares with the server. Later garbage is still collected.

Nothing here touches the loss path, the trees under test or a random generator.
"""

from __future__ import annotations

import gc

from transformers import AutoModelForImageTextToText

AutoModelForImageTextToText._model_mapping.keys()  # imports the model classes: see above
gc.collect()
gc.freeze()
