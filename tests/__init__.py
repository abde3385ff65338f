"""This project's tests; the test command that runs them is ``patchset.testcommand`` (scripts/test.sh)."""
