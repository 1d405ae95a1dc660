"""The headline ε of an interactive run (`pate label --round 2`): everything both rounds
released, composed.

What was released from the private data, under the **replace-one** relation of every
bound in `analysis` (one replaced example changes one teacher's shard, so one vote of
round 1 and one vote of round 2: teacher t's round-2 head is trained on shard t only):
round 1's labels and its sanitised ε (``release-round1.json``, published before round 2
began), round 2's labels and its sanitised ε (published now). Round 2's queries and
heads are chosen by the round-1 student, a function of round 1's release and public data,
so the rounds compose adaptively (Mironov 2017, Proposition 1 for RDP; adaptive
composition of privacy loss distributions for the PLD route).

Three routes, each sound; the headline is the smallest:

- **RDP of both sanitised releases** (both GNSS at the same order λ): each round's
  sanitised RDP is a released bound on the data-dependent RDP of that round's answers at
  λ (PATE 2018, Section 4.3), each release costs its own RDP at λ; RDP adds over the four
  releases, converted once at δ. The δ is δ plus both rounds' float64-sampler δ.
- **basic composition of the two published headlines** (always available, e.g. LNMax or
  two orders): ε₁ + ε₂ at δ₁ + δ₂ (Dwork & Roth 2014, Theorem 3.16).
- **data-independent**: `analysis.composition.compose` of the data-independent cost of
  every release (both rounds' labels, both sanitised releases) — what the ledger adds up
  — at its δ plus both rounds' float64-sampler δ.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

from analysis import composition
from analysis.rdp import eps_from_rdp


#: The routes by key (`Cumulative.routes`), in words.
ROUTES = {"rdp": "RDP of both sanitised releases", "basic": "basic composition of both rounds' headlines",
          "independent": "data-independent, every release"}


@dataclasses.dataclass(frozen=True)
class Cumulative:
    """The headline of both rounds: ε at δ by the smallest route (`ROUTES`, module docstring)."""

    eps: float
    delta: float
    route: str
    routes: dict


def _sampling(details: Mapping) -> float:
    return float(details.get("delta_sampling", 0.0) or 0.0)


def cumulative_headline(first: Mapping, second: Mapping, every: Sequence[composition.Cost], delta: float,
                        conversion: str) -> Cumulative:
    """ε of everything both rounds released (module docstring).

    Args:
      first, second: each round's published values (a release.json's ``details`` with its
        ``eps`` and ``delta``): ``eps``, ``delta``, and for a GNSS release ``rdp_sanitized``,
        ``release_rdp_cost``, ``release_order``; ``delta_sampling`` when the report has one.
      every: the data-independent cost of every release of both rounds.
      delta: the analysis δ of both rounds.
      conversion: the RDP → (ε, δ) conversion.
    """
    sampling = _sampling(first) + _sampling(second)
    routes = {"basic": (float(first["eps"]) + float(second["eps"]), float(first["delta"]) + float(second["delta"]))}
    gnss = all(k in r for r in (first, second) for k in ("rdp_sanitized", "release_rdp_cost", "release_order"))
    if gnss and float(first["release_order"]) == float(second["release_order"]):
        order = float(second["release_order"])
        rdp = sum(float(r["rdp_sanitized"]) + float(r["release_rdp_cost"]) for r in (first, second))
        eps = float(eps_from_rdp([order], [rdp], delta, conversion)[0]) if math.isfinite(rdp) else math.inf
        routes["rdp"] = (eps, delta + sampling)
    total = composition.compose(every, delta, conversion=conversion)
    routes["independent"] = (total.eps, total.delta + sampling)
    route = min(routes, key=lambda k: routes[k][0])
    # A δ of 1 or more guarantees nothing (`analysis.report.headline_delta` warns of it).
    return Cumulative(routes[route][0], min(routes[route][1], 1.0), route, {k: v[0] for k, v in routes.items()})
