"""Overlay of the Trinity-RFT policy-loss fix for pip-installed Trinity releases (mirrors Trinity's module paths).

Empty until the overlay work lands: today the fix is delivered as patches (patches/trinity/), applied by
scripts/apply.sh. Importing this package changes nothing.
"""
