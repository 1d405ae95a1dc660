"""The registry of mechanism records: every release kind pate knows, by name, and the one
parser of mechanism names (from CLI options, a config section, a labels.npz).

A record (`analysis.mechanisms.record.Mechanism`) carries everything that depends on which
mechanism it is — its sampler, its costs, its analyses and what it can do — so the steps, the
CLI's choices, the config's names, `plan`, `audit`, the report and the ledger read this table
and never test a name. Adding a mechanism is its module (record, analysis, sampler) and one
entry in `RECORDS`.

| record | needs teachers | exact noise | sanitised release | module |
|---|---|---|---|---|
| ``lnmax`` | yes | no (float64 Laplace) | smooth sensitivity | `analysis.mechanisms.noisy_max` |
| ``gnmax`` | yes | no (float64 Gaussian) | GNSS | `analysis.mechanisms.noisy_max` |
| ``confident-gnmax`` | yes | no (float64 Gaussian) | GNSS | `analysis.mechanisms.noisy_max` |
| ``gnmax-exact`` | yes | yes (discrete Gaussian, CKS 2020) | none: data-independent headline | `analysis.mechanisms.exact_gaussian` |
| ``confident-gnmax-exact`` | yes | yes (discrete Gaussian, CKS 2020) | none: data-independent headline | `analysis.mechanisms.exact_gaussian` |
| ``permute-and-flip`` | yes | yes (Bernoulli(e^−x) coins) | none: data-independent headline | `analysis.mechanisms.permute_flip` |
| ``exponential`` | yes | yes (rejection with Bernoulli(e^−x)) | none: data-independent headline | `analysis.mechanisms.exponential` |
| ``fine-grained`` | no: the records vote | yes (discrete Laplace / Gaussian) | none needed: data-independent | `analysis.mechanisms.fine_grained` |

Only ``fine-grained`` releases a noisy histogram (``noisy_histogram``); the others release labels alone.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from analysis.core.errors import PateError
from analysis.mechanisms.exact_gaussian import ConfidentGNMaxExact, GNMaxExact
from analysis.mechanisms.exponential import ExponentialMechanism
from analysis.mechanisms.fine_grained import FineGrained
from analysis.mechanisms.noisy_max import ConfidentGNMax, GNMax, LNMax
from analysis.mechanisms.permute_flip import PermuteAndFlip
from analysis.mechanisms.record import Mechanism

RECORDS: dict[str, type[Mechanism]] = {r.name: r for r in (LNMax, GNMax, ConfidentGNMax, GNMaxExact,
                                                              ConfidentGNMaxExact, PermuteAndFlip,
                                                              ExponentialMechanism, FineGrained)}
NAMES = tuple(RECORDS)
#: The mechanisms that aggregate teacher votes (`Mechanism.needs_teachers`): `--mechanism`'s
#: choices wherever votes are given.
TEACHER_NAMES = tuple(n for n, r in RECORDS.items() if r.needs_teachers)
#: The arrays `Mechanism.to_arrays` may write into a labels.npz: the name and every record's noise.
ARRAY_KEYS = ("mechanism", *dict.fromkeys(k for r in RECORDS.values() for k in r.array_keys()))


def record_type(mechanism: str) -> type[Mechanism]:
    """The record class of the mechanism named ``mechanism`` (before its noise is known,
    as in `analysis.planning.plan.plan`)."""
    if mechanism not in RECORDS:
        raise PateError(f"unknown mechanism '{mechanism}'; choose one of {', '.join(NAMES)}")
    return RECORDS[mechanism]


def from_options(mechanism: str, **given) -> Mechanism:
    """The record for ``mechanism`` from CLI-style options (``gamma=…, sigma=…``; None =
    not given). Every parameter the mechanism needs must be given and no other."""
    return record_type(mechanism).from_options(**given)


def from_noise(mechanism: str, **noise) -> Mechanism:
    """The record of the named mechanism from its noise alone, for a data-independent
    analysis (`analysis.reporting.accountants`): parameters it does not use are ignored, and
    Confident-GNMax's threshold, on which no data-independent cost depends (its
    threshold step is a Gaussian mechanism of sensitivity 1 on the top count whatever
    the threshold; PATE 2018, Section 4), is 0 unless given."""
    record = record_type(mechanism)
    given = {**record.accounting_defaults, **{k: v for k, v in noise.items() if v is not None}}
    return record.from_options(**{k: given.get(k) for k in record.option_names()})


def from_config(cfg) -> Mechanism:
    """The record of an ``[aggregation]`` config section (its unused keys are ignored)."""
    record = record_type(cfg.mechanism)
    return record.from_options(**{k: getattr(cfg, k) for k in record.option_names()})


def from_arrays(arrays: Mapping[str, np.ndarray], source: str = "labels.npz") -> Mechanism:
    """The record stored in a labels.npz (``mechanism`` and its parameters)."""
    if "mechanism" not in arrays:
        raise PateError(f"{source} has no 'mechanism' array; it was not written by `pate label`")
    name = str(np.asarray(arrays["mechanism"]))
    if name not in RECORDS:
        raise PateError(f"{source} names mechanism '{name}', which pate does not know")
    return RECORDS[name].from_arrays(arrays, source)
