"""Mirror of the trinity package of the same path: only the patched symbols."""
