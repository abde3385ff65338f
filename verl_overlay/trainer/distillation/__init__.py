"""Mirror of the verl package of the same path: only the patched symbols."""
