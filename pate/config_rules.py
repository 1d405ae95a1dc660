"""The one rule every config section's `validate()` applies: a failed check raises a
`PateError` that names the key at fault (``section.key message``). Its own module so that
`pate.config_sections` and the sections kept apart from it (`config_fedavg`, `config_synth`,
`config_rounds`, which it imports) share it."""

from __future__ import annotations

from analysis.errors import PateError


def require(ok: bool, section: str, key: str, message: str) -> None:
    """Raises ``PateError("section.key message")`` unless ``ok``."""
    if not ok:
        raise PateError(f"{section}.{key} {message}")
