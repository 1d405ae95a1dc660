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


#: The largest ε a config or option may ask for. Above it e^ε overflows a float64 (e^710) long before
#: any accountant answers, and a guarantee of e^1000 says nothing: every command that releases
#: (and `pate plan`) refuses more, naming the key.
MAX_EPS = 1000.0

#: The largest learning rate (or ADMM penalty ρ) a config may set: the programs run in float32,
#: whose largest number is 3.4e38, and a step of more than 1e6 times a gradient diverges at once;
#: a larger value is a typo, refused here rather than as overflow warnings mid-training.
MAX_RATE = 1e6

#: The largest float32 (the programs' precision).
FLOAT32_MAX = 3.4028234663852886e38


def eps(section: str, config, *keys: str) -> None:
    """Each key of ``config`` an ε in (0, `MAX_EPS`]."""
    for key in keys:
        value = getattr(config, key)
        require(0 < value <= MAX_EPS, section, key,
                f"must be a positive number of at most {MAX_EPS:g} (an eps above it leaves no guarantee), got {value:g}")


def rate(section: str, config, *keys: str) -> None:
    """Each key of ``config`` a learning rate (or penalty) in (0, `MAX_RATE`]."""
    for key in keys:
        value = getattr(config, key)
        require(0 < value <= MAX_RATE, section, key, f"must be a positive number of at most {MAX_RATE:g} "
                f"(larger steps overflow the float32 training), got {value:g}")


#: The public feature maps `[features] map`, `[teachers] features` and `[dpsgd] features` may name
#: (`pate.programs.public_features.MAPS` holds what each does), alone or joined by "+" (their
#: concatenation).
FEATURE_MAPS = ("scattering", "pixels", "none", "learned", "hog", "coates-ng")


def check_map(section: str, key: str, value: str) -> None:
    """Refuses a map name that is not one of `FEATURE_MAPS` or several joined by "+" (each once)."""
    parts = value.split("+")
    bad = [p for p in parts if p not in FEATURE_MAPS]
    require(not bad and len(set(parts)) == len(parts), section, key,
            f"must be one of {', '.join(FEATURE_MAPS)} or several joined by \"+\" (each once), "
            f"got {value!r}")
