"""``patchset doctor``: is a run affected? A verl launch line or a Trinity-RFT YAML is composed as its trainer composes
it (`compose`); the losses it uses are read off the series' ``parts.toml`` (``uses``) and each is judged on the
packages this Python imports (`assess`): how much the split changes it at these settings, and whether the fix acts."""
