"""The `pate` command line: each command parses, loads its inputs and calls one library
function. Usage errors exit with status 2 (click), failures with status 1, each as one
line on stderr."""

from __future__ import annotations

import sys

import click

from analysis.errors import PateError


def _version() -> str:
    from pate import __version__

    return __version__


class _Group(click.Group):
    """Turns a `PateError` anywhere below into one line on stderr and exit status 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PateError as err:
            click.echo(f"pate: {err}", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="pate")
def main() -> None:
    """PATE: train teachers on private data, release noisy labels, train a student,
    and account for the privacy spent."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
