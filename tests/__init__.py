"""This project's tests; ``tests.harness`` is the test command itself."""
