"""Maintaining the series (checkout, refresh, export) and sending it upstream as one branch per concern."""
