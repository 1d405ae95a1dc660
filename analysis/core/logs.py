"""Library logs kept off the terminal: absl's logger (orbax's, dp_accounting's) raised for a
block, so a user reads pate's one-line message, not a library's traceback."""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def quiet_absl(level: int = logging.CRITICAL):
    """Raises absl's logger (orbax's, dp_accounting's) to ``level`` for the block: orbax's
    writer threads log each failed write with a traceback (a hundred lines on a full or
    read-only disk) before the error reaches the caller, whose one line says it all."""
    absl_logger = logging.getLogger("absl")
    previous = absl_logger.level
    absl_logger.setLevel(level)
    try:
        yield
    finally:
        absl_logger.setLevel(previous)
