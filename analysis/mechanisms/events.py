"""The dp-accounting event of a release's data-independent cost, so a user can compose pate's
releases with the rest of their DP work in dp-accounting's own accountants
(`pate ledger --export`).

Each kind of `analysis.mechanisms.composition.Cost` maps to the dp-accounting event whose
guarantee is the cost's own, or to none where dp-accounting has no event that states it:

- ``"gaussian"`` (μ-GDP): ``GaussianDpEvent(noise_multiplier=1/μ)``, a Gaussian mechanism of
  sensitivity 1 and σ = 1/μ, whose privacy profile is exactly μ-GDP's (Dong, Roth & Su 2022,
  Theorem 2.7); both of dp-accounting's accountants read it, and the ledger's two routes compute
  the same RDP curve (α μ²/2) and PLD.
- ``"pure"`` (``count`` answers of an ε₀-DP mechanism): ``ZCDpEvent(ε₀²/2)`` self-composed:
  ε₀-DP implies ½ε₀²-zCDP (Bun & Steinke 2016, Proposition 3.3). Only dp-accounting's RDP
  accountant reads it, and it is looser than the ledger's randomized-response curve (the
  tightest RDP of an ε₀-DP pair, `analysis.mechanisms.composition.rr_rdp`): dp-accounting has no
  event for a generic pure-ε mechanism whose PLD is the dominating randomized response (its
  ``RandomizedResponseDpEvent`` is read by neither accountant in dp-accounting 0.6), and its
  ``LaplaceDpEvent`` would understate an argmax's cost.
- ``"discrete-gaussian"`` (μ²): ``ZCDpEvent(μ²/2)`` — the discrete Gaussian is (μ²/2)-zCDP
  (Canonne, Kamath & Steinke 2020, Proposition 5), the RDP curve the ledger composes; no PLD,
  as in the ledger.
- ``"gnss"``, ``"approx"``, ``"poisson-gaussian"``, ``"skellam"``, ``"ddg"``: ``UnsupportedDpEvent``
  (dp-accounting has no Skellam event). A GNSS release's RDP
  curve and an (ε, δ) step have no dp-accounting event, and dp-accounting's subsampled Gaussian
  is accounted under add/remove, not the replace-one curve the ledger charges
  (`analysis.mechanisms.composition.dpsgd_replace_one_rdp`); exporting it would state another
  relation's figure.

`ledger_event` composes a data set's costs; an export that holds an unsupported event says so,
and dp-accounting's accountants then refuse it rather than report a figure that is not the
ledger's.
"""

from __future__ import annotations

import math
from typing import Iterable

from analysis.mechanisms.composition import Cost, is_free


def of_cost(cost: Cost):
    """The dp-accounting event of one cost (module docstring)."""
    from dp_accounting import dp_event

    p = cost.params
    if is_free(cost):
        return dp_event.NoOpDpEvent()
    if cost.kind == "gaussian":
        return dp_event.GaussianDpEvent(noise_multiplier=1.0 / math.sqrt(p["mu2"]))
    if cost.kind == "pure":
        one = dp_event.ZCDpEvent(rho=p["eps0"] ** 2 / 2.0)
        return one if int(p["count"]) == 1 else dp_event.SelfComposedDpEvent(one, int(p["count"]))
    if cost.kind == "discrete-gaussian":
        return dp_event.ZCDpEvent(rho=p["mu2"] / 2.0)
    return dp_event.UnsupportedDpEvent()


def ledger_event(costs: Iterable[Cost]):
    """The composition of every cost as one dp-accounting event (``ComposedDpEvent``)."""
    from dp_accounting import dp_event

    return dp_event.ComposedDpEvent([of_cost(c) for c in costs])


def supported(event) -> dict[str, bool]:
    """Which of dp-accounting's accountants read ``event``: ``{"rdp": …, "pld": …}``."""
    from dp_accounting import pld, rdp

    return {"rdp": rdp.RdpAccountant().supports(event), "pld": pld.PLDAccountant().supports(event)}


def to_json(event) -> dict:
    """``event`` as JSON: dp-accounting's own named-tuple form (``module_name``, ``class_name``
    and the fields), nested events as nested objects."""
    def plain(value):
        if hasattr(value, "_asdict"):
            return {k: plain(v) for k, v in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(event.to_named_tuple())


def from_json(doc: dict):
    """The dp-accounting event of :func:`to_json`'s form. Only classes of
    ``dp_accounting.dp_event`` are built: a file names no other module to import."""
    from dp_accounting import dp_event

    def build(value):
        if isinstance(value, dict) and "class_name" in value:
            if value.get("module_name") != "dp_accounting.dp_event" or not hasattr(dp_event, value["class_name"]):
                raise ValueError(f"not a dp-accounting event: {value.get('module_name')}.{value.get('class_name')}")
            cls = getattr(dp_event, value["class_name"])
            if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
                raise ValueError(f"not a dp-accounting event: {value['class_name']}")
            return cls(**{k: build(v) for k, v in value.items() if k not in ("module_name", "class_name")})
        if isinstance(value, list):
            return [build(v) for v in value]
        return value

    return build(doc)


def release_doc(costs: Iterable[Cost]) -> dict:
    """A release file's ``dp_event`` entry: the event of its own costs (:func:`to_json`) and
    which of dp-accounting's accountants read it."""
    event = ledger_event(costs)
    return {"event": to_json(event), "read_by": [k for k, v in supported(event).items() if v]}
