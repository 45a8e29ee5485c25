"""Errors whose message is meant for the user: printed as one line, exit code 2."""

EXIT_BAD_INPUT = 2  # every command's exit code for bad input or an unmet precondition (one line on stderr)


class UserError(Exception):
    """Bad input or an unmet precondition the user can fix; the message says how."""


def exit_code_of(prog: str, run) -> int:
    """`run()`'s exit code; a UserError becomes one line on stderr (`prog: error: ...`) and EXIT_BAD_INPUT."""
    import sys

    try:
        return run()
    except UserError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
