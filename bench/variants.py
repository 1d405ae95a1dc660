"""What the variant benches share: a variant (``key=value,...`` of one config section) read
into that section's dataclass; one JSON line per variant as soon as it is measured (so a
killed run keeps what it finished), then the rows again as one markdown table."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Callable, Iterable, Sequence


def apply_variant(section_config, section: str, variant: str, **fixed):
    """``section_config`` (a config section's dataclass, e.g. ``config.teachers`` for
    ``section = "teachers"``) with ``fixed`` and the variant's ``key=value`` overrides
    (TOML values) replaced; an unknown key ends the bench with a message."""
    from pate.config import coerce, parse_override

    hints = typing.get_type_hints(type(section_config))
    overrides = dict(fixed)
    for item in filter(None, variant.split(",")):
        dotted, value = parse_override(f"{section}.{item}")
        key = dotted.partition(".")[2]
        if key not in hints:
            raise SystemExit(f"unknown [{section}] key {key!r} in variant {variant!r}")
        overrides[key] = coerce(value, hints[key])
    return dataclasses.replace(section_config, **overrides)


def run_variants(variants: Iterable[str], run: Callable[[str], dict]) -> list[dict]:
    """``run(variant)`` for each variant, each row printed as JSON when it is done."""
    rows = []
    for variant in variants:
        rows.append(run(variant))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def print_table(header: Sequence[str], cells: Iterable[Sequence[str]]) -> None:
    """A markdown table of ``header`` and one row of ``cells`` per line, after a blank line."""
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in cells:
        print("| " + " | ".join(row) + " |")
