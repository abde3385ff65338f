"""``patchset doctor``: is a run affected? A verl launch line is composed as its trainer composes it (`compose`), a
Trinity-RFT YAML as Trinity loads and validates it (`trinity`); the losses it uses are read off the series'
``parts.toml`` (``uses``) and each is judged on the packages this Python imports (`assess`): how much the split
changes it at these settings, and whether the fix acts here."""
