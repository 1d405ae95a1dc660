"""The noisy aggregators as records: one frozen, self-validating record per mechanism.

A record is what the CLI builds from its options (:func:`from_options`), what the
aggregator runs (``pate.aggregation.aggregate``), what ``labels.npz`` stores and loads
(:meth:`Mechanism.to_arrays`, :func:`from_arrays`) and what ``analyze`` and ``plan``
account for. Adding a mechanism means one record here and one branch per layer.

Neighbouring relation everywhere: one teacher's vote changes (PATE 2017, Section 3; PATE
2018, Section 4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping

import numpy as np

from analysis.errors import PateError
from analysis.validation import check_positive, check_sigma


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """Base of the records; ``name`` is the mechanism's name in files and on the CLI."""

    name: ClassVar[str] = ""

    def params(self) -> dict[str, float]:
        """The noise parameters, as labels.npz stores them."""
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The record as labels.npz arrays: ``mechanism`` and one 0-d array per parameter."""
        return {"mechanism": np.array(self.name), **{k: np.array(v) for k, v in self.params().items()}}

    def describe(self) -> str:
        return f"{self.name} (" + ", ".join(f"{k} {v:g}" for k, v in self.params().items()) + ")"


@dataclasses.dataclass(frozen=True)
class LNMax(Mechanism):
    """LNMax (PATE 2017, Eq. 1): argmax of the counts plus Lap(1/gamma) noise; each answer is
    ``2 gamma``-DP."""

    gamma: float
    name: ClassVar[str] = "lnmax"

    def __post_init__(self):
        object.__setattr__(self, "gamma", check_positive("gamma", self.gamma))


@dataclasses.dataclass(frozen=True)
class GNMax(Mechanism):
    """GNMax (PATE 2018, Section 4.1): argmax of the counts plus N(0, sigma²) noise;
    ``(λ, λ/σ²)``-RDP per answer (Proposition 8)."""

    sigma: float
    name: ClassVar[str] = "gnmax"

    def __post_init__(self):
        object.__setattr__(self, "sigma", check_sigma(self.sigma, "sigma"))


@dataclasses.dataclass(frozen=True)
class ConfidentGNMax(Mechanism):
    """Confident-GNMax (PATE 2018, Algorithm 1): answer only when the top count plus
    N(0, sigma_threshold²) reaches ``threshold``, then GNMax with ``sigma``."""

    threshold: float
    sigma_threshold: float
    sigma: float
    name: ClassVar[str] = "confident-gnmax"

    def __post_init__(self):
        threshold = float(self.threshold)
        if not math.isfinite(threshold):
            raise PateError(f"threshold must be a finite number, got {self.threshold}")
        object.__setattr__(self, "threshold", threshold)
        object.__setattr__(self, "sigma_threshold", check_sigma(self.sigma_threshold, "sigma_threshold"))
        object.__setattr__(self, "sigma", check_sigma(self.sigma, "sigma"))


RECORDS: dict[str, type[Mechanism]] = {r.name: r for r in (LNMax, GNMax, ConfidentGNMax)}
NAMES = tuple(RECORDS)


def _fields(name: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(RECORDS[name]))


def from_options(mechanism: str, **given) -> Mechanism:
    """The record for ``mechanism`` from CLI-style options (``gamma=…, sigma=…``; None =
    not given). Every parameter the mechanism needs must be given and no other."""
    if mechanism not in RECORDS:
        raise PateError(f"unknown mechanism '{mechanism}'; choose one of {', '.join(NAMES)}")
    needs = _fields(mechanism)
    missing = [k for k in needs if given.get(k) is None]
    if missing:
        raise PateError(f"{mechanism} needs {', '.join('--' + k.replace('_', '-') for k in missing)} "
                        "(no default noise is assumed)")
    extra = [k for k, v in given.items() if v is not None and k not in needs]
    if extra:
        raise PateError(f"{', '.join('--' + k.replace('_', '-') for k in extra)} do(es) not apply to {mechanism}")
    return RECORDS[mechanism](**{k: given[k] for k in needs})


def from_config(cfg) -> Mechanism:
    """The record of an ``[aggregation]`` config section (its unused keys are ignored)."""
    if cfg.mechanism not in RECORDS:
        raise PateError(f"unknown mechanism '{cfg.mechanism}'; choose one of {', '.join(NAMES)}")
    return RECORDS[cfg.mechanism](**{k: getattr(cfg, k) for k in _fields(cfg.mechanism)})


def from_arrays(arrays: Mapping[str, np.ndarray], source: str = "labels.npz") -> Mechanism:
    """The record stored in a labels.npz (``mechanism`` and its parameters)."""
    if "mechanism" not in arrays:
        raise PateError(f"{source} has no 'mechanism' array; it was not written by `pate label`")
    name = str(np.asarray(arrays["mechanism"]))
    if name not in RECORDS:
        raise PateError(f"{source} names mechanism '{name}', which pate does not know")
    values = {}
    for key in _fields(name):
        if key not in arrays:
            raise PateError(f"{source} labelled by {name} lacks its '{key}' parameter")
        try:
            values[key] = float(np.asarray(arrays[key]))
        except (TypeError, ValueError):
            raise PateError(f"{source}: '{key}' is not a number") from None
    try:
        return RECORDS[name](**values)
    except PateError as err:
        raise PateError(f"{source}: {err}") from None
