"""The pinned test environment, and the regression run that ends `patchset apply`."""
