"""Planning and applying a series onto a tree, all or nothing."""
