"""Errors whose message is meant for the user: printed as one line, exit code 2."""

EXIT_BAD_INPUT = 2  # every command's exit code for bad input or an unmet precondition (one line on stderr)


class UserError(Exception):
    """Bad input or an unmet precondition the user can fix; the message says how."""
