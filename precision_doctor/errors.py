"""Errors a user can fix: the CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad input or usage; the message is shown to the user as is."""


class NoPassingSet(Exception):
    """The search found no fallback set that meets the tolerance."""
