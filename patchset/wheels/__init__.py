"""Patched wheels of the pinned releases, and the manifest each carries."""
