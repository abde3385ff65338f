"""Git, files and process plumbing: snapshots, signals, merges, console output. Knows nothing about verl or Trinity."""
