"""The one error type for bad input, shared by `analysis` and `pate`.

The CLI prints its message as one line on stderr and exits with status 1. A message
says what is wrong and what to do about it.
"""


class PateError(ValueError):
    """Bad input or a failed step, with a message a user can act on."""
