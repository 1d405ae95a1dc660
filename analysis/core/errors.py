"""The one error type for bad input, shared by `analysis` and `pate`.

The CLI prints its message as one line on stderr and exits with status 1 (2 for an
`OptionError`). A message says what is wrong and what to do about it.
"""


class PateError(ValueError):
    """Bad input or a failed step, with a message a user can act on."""


class OptionError(PateError):
    """A bad value of one command-line option, found where the checking belongs (the
    library); the CLI reports it as a usage error naming the option (exit status 2)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


class CommitFailed(PateError):
    """A commit (the renames that put a release's staged files into place) that failed and
    put every file back as it was: nothing it was to publish ever reached its place, so a
    charge made for it is withdrawn (`pate.store.door.publish`)."""
