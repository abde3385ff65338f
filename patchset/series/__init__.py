"""The patch series model: the series file, each patch and its DEP-3 header, concern groups, git am, the lint."""
