"""The one rule every config section's `validate()` applies: a failed check raises a
`PateError` that names the key at fault (``section.key message``). Its own module so that
every section module (`pate.config.sections`, `round_sections`, `baseline_sections`) shares it."""

from __future__ import annotations

from analysis.errors import PateError


def require(ok: bool, section: str, key: str, message: str) -> None:
    """Raises ``PateError("section.key message")`` unless ``ok``."""
    if not ok:
        raise PateError(f"{section}.{key} {message}")
