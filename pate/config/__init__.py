"""Run configuration: loading, validating, overriding, writing and hashing the TOML config
of a run, with messages that name the file and the key.

A config file is a TOML document whose tables are the fields of `Config` (`[data]`,
`[teachers]`, ...), the frozen section dataclasses of `pate.config.sections` (re-exported
here). Every key has a default, so a file only says what differs. Loading, overrides, TOML
output and hashing follow from the fields, so a new section needs nothing here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal, Mapping

import tomli_w

from analysis.core.errors import PateError
from pate.config.sections import (  # noqa: F401  (re-exported: pate.config.TeachersConfig, ...)
    AggregationConfig,
    Config,
    DataConfig,
    FeaturesConfig,
    FineGrainedConfig,
    PrivacyConfig,
    StudentConfig,
    TeachersConfig,
    section_fields,
)
from pate.config.baseline_sections import DpsgdConfig  # noqa: F401  (re-exported: pate.config.DpsgdConfig)
from pate.config.silo_sections import SilosConfig  # noqa: F401  (re-exported: pate.config.SilosConfig)


def sections() -> dict[str, type]:
    """The TOML sections a config file may hold, by name."""
    hints = typing.get_type_hints(Config)
    return {f.name: hints[f.name] for f in section_fields()}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}[item]
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[tp]


def coerce(value: Any, tp: Any) -> Any:
    """Returns `value` as type `tp`, or raises TypeError."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        if isinstance(value, str) and value in typing.get_args(tp):
            return value
        raise TypeError
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return tuple(coerce(v, typing.get_args(tp)[0]) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError
    if tp is str:
        if isinstance(value, str):
            return value
        raise TypeError
    raise AssertionError(f"config field type {tp!r} is not supported")


#: Integers in a config are counts, sizes and seeds: they must fit the 32-bit integers
#: the JAX programs use (a larger value is a typo, not a wish).
MAX_INT = 2**31 - 1


def _check_number(value: Any, where: str) -> None:
    """Refuses non-finite floats and integers beyond `MAX_INT` (also inside lists)."""
    for v in value if isinstance(value, tuple) else (value,):
        if isinstance(v, float) and not math.isfinite(v):
            raise PateError(f"{where} must be a finite number, got {v}")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
            raise PateError(f"{where} must be at most {MAX_INT} in size, got {v}")


def _build_section(name: str, cls: type, raw: Mapping[str, Any], source: str) -> Any:
    if not isinstance(raw, Mapping):
        raise PateError(f"{source}: [{name}] must be a table")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in hints:
            raise PateError(f"{source}: unknown key {name}.{key}; known keys in [{name}]: "
                            + ", ".join(known))
        try:
            values[key] = coerce(value, hints[key])
        except TypeError:
            raise PateError(f"{source}: {name}.{key} must be {_type_name(hints[key])}, "
                            f"got {value!r}") from None
        _check_number(values[key], f"{source}: {name}.{key}")
    section = cls(**values)
    try:
        section.validate()
    except PateError as err:
        raise PateError(f"{source}: {err}") from None
    return section


def config_from_dict(raw: Mapping[str, Any], source: str = "config") -> Config:
    """Builds and validates a `Config` from nested mappings (parsed TOML).

    Args:
      raw: `{section: {key: value}}`; missing sections and keys take their defaults.
      source: what to call the input in error messages (usually the file name).

    Raises:
      PateError: an unknown section or key, a value of the wrong type, or an invalid
        value, named with `source`.
    """
    known = sections()
    for name in raw:
        if name not in known:
            raise PateError(f"{source}: unknown section [{name}]; known sections: "
                            + ", ".join(f"[{k}]" for k in known))
    built = {name: _build_section(name, cls, raw.get(name, {}), source)
             for name, cls in known.items()}
    defaulted = frozenset(f"{name}.{f.name}" for name, cls in known.items() for f in dataclasses.fields(cls)
                          if f.name not in raw.get(name, {}))
    return Config(**built, defaulted=defaulted)


def config_to_dict(config: Config) -> dict[str, dict[str, Any]]:
    """The config as plain nested dicts (tuples become lists), as written to TOML."""

    def plain(v: Any) -> Any:
        return list(v) if isinstance(v, tuple) else v

    return {f.name: {k: plain(v) for k, v in dataclasses.asdict(getattr(config, f.name)).items()}
            for f in section_fields()}


def parse_override(text: str) -> tuple[str, Any]:
    """Parses `section.key=value` (value in TOML syntax; a bare word is a string)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or key.count(".") != 1:
        raise PateError(f"override {text!r} must look like section.key=value, "
                        "e.g. teachers.epochs=5")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    except RecursionError:
        raise PateError(f"override {key}: its value is nested too deeply to read; give a plain value") from None
    return key, parsed


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict:
    """Returns a copy of parsed TOML with `{"section.key": value}` overrides applied."""
    merged = {name: dict(table) if isinstance(table, Mapping) else table
              for name, table in raw.items()}
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if not key:
            raise PateError(f"override {dotted!r} must name section.key")
        table = merged.setdefault(section, {})
        if isinstance(table, dict):
            table[key] = value
    return merged


#: The configs that ship inside the package (the repository's ``configs/`` links here), so an
#: installed pate has its defaults: ``--config tiny`` is ``configs/tiny.toml``.
PRESETS = Path(__file__).resolve().parent / "presets"


def presets() -> tuple[str, ...]:
    """The names of the bundled configs (``--config NAME``)."""
    return tuple(sorted(p.stem for p in PRESETS.glob("*.toml")))


def config_file(path: str | Path) -> Path:
    """The file a ``--config`` value names: the file itself, or the bundled config (`presets`) a
    bare name means (``tiny``) where no such file exists."""
    path = Path(path)
    return _bundled(path) or path


def _bundled(path: Path) -> Path | None:
    """The bundled config a bare name (``tiny`` or ``tiny.toml``) means, when no such file exists."""
    if path.exists() or len(path.parts) != 1 or path.suffix not in ("", ".toml"):
        return None
    candidate = PRESETS / f"{path.stem}.toml"
    return candidate if candidate.is_file() else None


def check_config(config, what: str) -> None:
    """Refuses, in one line, a `config` that is not a `Config` (``pate.run(None, ...)``)."""
    if not isinstance(config, Config):
        raise PateError(f"{what} needs a pate config (pate.load_config(PATH)), got {type(config).__name__}")


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                text: str | None = None) -> Config:
    """Reads a TOML config file, applies overrides and validates the result.

    Args:
      path: the TOML file, or the name of a bundled config (`presets`) where no such file
        exists in the working directory.
      overrides: `{"section.key": value}` applied on top of the file (command-line
        options such as `--teachers`).
      text: the file's content when the caller read it already (`pate.store.rundir` reads a
        run's config.toml only when it is a plain file); `path` then names it in messages.

    Returns:
      The resolved, validated `Config`.

    Raises:
      PateError: the file is missing or not valid TOML, or a key is unknown, of the
        wrong type or out of range (the message names the file and the key).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise PateError(f"the config path must be a file name or a bundled config's name, got "
                        f"{type(path).__name__}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise PateError("overrides must be a mapping of \"section.key\" to values, e.g. {\"teachers.epochs\": 5}, "
                        f"got {type(overrides).__name__}")
    path = Path(path)
    if text is None:
        path = config_file(path)
        if path.exists() and not path.is_file():  # a FIFO would block the read for ever, a folder fail oddly
            raise PateError(f"config file {path} is not a plain file; give a TOML file")
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except FileNotFoundError:
        raise PateError(f"config file {path} not found; give a file, or one of the bundled configs by name: "
                        f"{', '.join(presets())}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PateError(f"cannot read config file {path}: {err}") from None
    if text.startswith(CONFIG_HEAD) and not text.rstrip("\n").endswith(CONFIG_END):
        raise PateError(f"{path} is cut short (its last line is not {CONFIG_END!r}): the config is damaged; "
                        "restore it (a run's config.toml: or run again with --overwrite)")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PateError(f"{path}: not valid TOML: {err}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise PateError(f"{path}: a value is nested too deeply to read (arrays or tables inside each other "
                        "thousands of times); no pate key holds more than a flat list") from None
    if not raw:
        raise PateError(f"config file {path} is empty: give a config from configs/ (e.g. "
                        "configs/quickstart.toml); a run directory's config.toml is written by "
                        "`pate train-teachers`")
    source = str(path)
    if overrides:
        source += " (with overrides " + ", ".join(f"{k}={v!r}" for k, v in overrides.items()) + ")"
    return config_from_dict(apply_overrides(raw, overrides), source)


#: The first and last lines of a config pate writes (a run's config.toml): a file that begins
#: with the first and lacks the last was cut short — even on a line boundary, where the rest
#: would still parse as a shorter config with defaults in place of the lost keys. Configs of
#: older versions and hand-written ones have neither and read as before.
CONFIG_HEAD = "# pate run config: written whole, from this line to the end line"
CONFIG_END = "# end of pate run config"


def config_file_text(config: Config) -> str:
    """`config_to_toml` between `CONFIG_HEAD` and `CONFIG_END`: what a run's config.toml holds."""
    return f"{CONFIG_HEAD}\n{config_to_toml(config)}{CONFIG_END}\n"


def config_to_toml(config: Config) -> str:
    """The resolved config as a TOML document that `load_config` reads back unchanged."""
    return tomli_w.dumps(config_to_dict(config))


def config_hash(config: Config) -> str:
    """A stable 16-hex-digit hash of the resolved config (every key, defaults included)."""
    canonical = json.dumps(config_to_dict(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def config_diff(a: Config, b: Config) -> list[str]:
    """The `section.key` names whose values differ between two configs."""
    da, db = config_to_dict(a), config_to_dict(b)
    return [f"{s}.{k}" for s in da for k in da[s] if da[s][k] != db[s][k]]
