"""The headline ε of an interactive run (`pate label --round 2`): everything both rounds
released, composed from data-independent costs only.

Neighbouring relation: **replace-one** on the private training set, the relation of every
bound in `analysis` (`analysis.composition.RELATION`): one replaced example changes one
teacher's shard, so one vote of round 1 and one vote of round 2 (teacher t's round-2 head
is trained on shard t only).

What was released from the private data: round 1's labels and its sanitised ε
(``release-round1.json``, published before round 2 began), round 2's labels and its
sanitised ε. Round 2's queries and heads are chosen by the round-1 student, a function of
round 1's release and public data: the four releases are an adaptive composition.

**The published headline** is `analysis.composition.compose` of the data-independent cost
of each of the four releases (`analysis.composition.Cost`: the labels' noise and query
count, each sanitised release's own noise), at δ plus both rounds' float64-sampler δ
(`analysis.noise`). Each cost is an RDP curve that holds for *every* replace-one pair and
every choice of the queries, so the curves add under adaptive composition: if M₁ is
(α, ε₁)-RDP and M₂(·, y) is (α, ε₂)-RDP for every output y of M₁, the pair is
(α, ε₁ + ε₂)-RDP (Mironov 2017, "Rényi Differential Privacy", Proposition 1), converted
once at δ (`analysis.rdp`). `compose` also composes their privacy loss distributions and
publishes the smaller (`analysis.composition` module docstring: each route is sound).

**Not published**: the sum of both rounds' published headlines and the sum of both
sanitised RDPs. Each rests on a data-dependent, ex-post bound on one release; ex-post
guarantees do not add (`analysis.composition` module docstring: Redberg & Wang 2021; Ligett
et al. 2017), and no theorem in this code covers two adaptively chosen smooth-sensitivity
releases. `diagnostics` computes them, named as such, for comparison only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from analysis import composition
from analysis.rdp import eps_from_rdp


#: The published route (`Cumulative.route`), in words.
ROUTE = "data-independent composition of every release of both rounds"
#: Figures that are *not* a guarantee (`diagnostics`), in words.
DIAGNOSTICS = {"rdp": "sum of both rounds' sanitised RDPs (ex-post: not a guarantee, not published)",
               "basic": "sum of both rounds' own headlines (ex-post: not a guarantee, not published)"}


@dataclasses.dataclass(frozen=True)
class Cumulative:
    """The headline of both rounds: ε at δ of the data-independent composition.

    Attributes:
      eps, delta: the guarantee.
      route: `ROUTE`, and which of `composition.compose`'s routes gave it ("rdp" or "pld").
      routes: ε by each of `compose`'s routes (both data-independent).
    """

    eps: float
    delta: float
    route: str
    routes: dict


def _sampling(details: Mapping) -> float:
    return float(details.get("delta_sampling", 0.0) or 0.0)


def cumulative_headline(first: Mapping, second: Mapping, every: Sequence[composition.Cost], delta: float,
                        conversion: str) -> Cumulative:
    """ε of everything both rounds released (module docstring: the theorem and the relation).

    Args:
      first, second: each round's published values (a release.json's ``details``); only their
        ``delta_sampling`` (the float64 label-noise δ, `analysis.noise`) is read.
      every: the data-independent cost of every release of both rounds.
      delta: the analysis δ of both rounds.
      conversion: the RDP → (ε, δ) conversion.
    """
    total = composition.compose(every, delta, conversion=conversion)
    sampling = _sampling(first) + _sampling(second)
    # A δ of 1 or more guarantees nothing (`analysis.report.headline_delta` warns of it).
    return Cumulative(total.eps, min(total.delta + sampling, 1.0), total.route, dict(total.routes))


def diagnostics(first: Mapping, second: Mapping, delta: float, conversion: str) -> dict[str, float]:
    """The figures the headline does **not** publish (module docstring), by `DIAGNOSTICS` key:
    "basic", the sum of both rounds' own headlines; "rdp", where both rounds released a GNSS
    value at one order, the sum of their sanitised RDPs and release costs converted at
    ``delta``. Ex-post values: no guarantee, for comparison with the headline only."""
    out = {"basic": float(first["eps"]) + float(second["eps"])}
    keys = ("rdp_sanitized", "release_rdp_cost", "release_order")
    if all(k in r for r in (first, second) for k in keys) and float(first["release_order"]) == float(
            second["release_order"]):
        rdp = sum(float(r["rdp_sanitized"]) + float(r["release_rdp_cost"]) for r in (first, second))
        out["rdp"] = (float(eps_from_rdp([float(second["release_order"])], [rdp], delta, conversion)[0])
                      if math.isfinite(rdp) else math.inf)
    return out
