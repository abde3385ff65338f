"""Overlay of the verl critic fix for pip-installed verl releases (mirrors verl's module paths).

Empty until the overlay work lands: today the fix is delivered as patches (patches/verl/), applied by
scripts/apply.sh. Importing this package changes nothing.
"""
