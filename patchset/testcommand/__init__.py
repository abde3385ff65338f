"""The test command (scripts/test.sh): its steps, environments and checks. Not shipped."""
