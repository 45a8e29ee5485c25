"""Errors whose message is meant for the user: printed as one line, exit code 2."""


class UserError(Exception):
    """Bad input or an unmet precondition the user can fix; the message says how."""
