"""The one rule every config section's `validate()` applies: a failed check raises a
`PateError` that names the key at fault (``section.key message``). Its own module so that
every section module (`pate.config.sections`, `round_sections`, `baseline_sections`) shares it."""

from __future__ import annotations

from analysis.core.errors import PateError


def require(ok: bool, section: str, key: str, message: str) -> None:
    """Raises ``PateError("section.key message")`` unless ``ok``."""
    if not ok:
        raise PateError(f"{section}.{key} {message}")


def positive(section: str, config, *keys: str) -> None:
    """Each key of ``config`` a positive finite number (``section.key must be a positive number``)."""
    for key in keys:
        value = getattr(config, key)
        require(0 < value < float("inf"), section, key, f"must be a positive number, got {value}")


def at_least_one(section: str, config, *keys: str) -> None:
    """Each key of ``config`` a count of at least 1 (``section.key must be >= 1``)."""
    for key in keys:
        value = getattr(config, key)
        require(value >= 1, section, key, f"must be >= 1, got {value}")
