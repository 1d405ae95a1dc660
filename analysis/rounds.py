"""The headline ε of an interactive run (`pate label --round 2`): everything both rounds
released, composed.

What was released from the private data, under the **replace-one** relation of every
bound in `analysis` (one replaced example changes one teacher's shard, so one vote of
round 1 and one vote of round 2: teacher t's round-2 head is trained on shard t only):

1. round 1's labels, 2. round 1's sanitised ε (published before round 2, when round 1
   was analysed: ``earlier``), 3. round 2's labels, 4. the sanitised ε published now.

Round 2's queries are chosen by the round-1 student, a function of release 1 and public
data, so the rounds compose adaptively (Mironov 2017, Proposition 1, for RDP; the PLD
composition of dp-accounting, for adaptively chosen mechanisms, by the same argument).

Two routes, each sound; the headline is the smaller:

- **sanitised**: the report of both rounds' votes (`analysis.report.gnmax_report` over
  the queries of both rounds, whose data-dependent RDP is the sum of the per-query bounds
  of both rounds — composition of the answers, PATE 2018 Theorem 6 / Proposition 7 —
  released once by GNSS, its own cost included: PATE 2018, Section 4.3), plus the RDP of
  every ``earlier`` GNSS release at the same order (RDP adds), converted once; an earlier
  (ε, δ) release (LNMax's smooth-sensitivity release) is added by basic composition
  (Dwork & Roth 2014, Theorem 3.16). For an LNMax report, whose own headline is already
  an (ε, δ) figure, earlier releases are added by basic composition too.
- **data-independent**: `analysis.composition.compose` of the data-independent cost of
  every release (both rounds' labels, both sanitised releases): what the ledger adds up.

The δ of the headline is the report's (its δ, its release's and the float64 label
samplers' over the queries of both rounds) plus the δ of the earlier (ε, δ) releases,
which bounds the δ of either route.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from analysis import composition
from analysis.rdp import eps_from_rdp


@dataclasses.dataclass(frozen=True)
class Cumulative:
    """The headline of both rounds: ε at δ by the smaller route (module docstring)."""

    eps: float
    delta: float
    route: str
    routes: dict


def cumulative_headline(report, earlier: Sequence[composition.Cost], every: Sequence[composition.Cost],
                        delta: float, conversion: str) -> Cumulative:
    """ε of everything the rounds released (module docstring).

    Args:
      report: the `analysis.report.PrivacyReport` over the queries of every round (its
        ``eps``, ``delta_total`` and, for GNSS, ``rdp_sanitized``, ``release_rdp_cost``,
        ``release_order``).
      earlier: the data-independent costs of the sanitised releases published before it.
      every: the data-independent costs of every release of the rounds (labels of each
        round, every sanitised release, this one's included).
      delta: the analysis δ.
      conversion: the RDP → (ε, δ) conversion of the report.
    """
    keys = {i.key for i in report.items}
    approx = [c for c in earlier if c.kind == "approx"]
    extra_eps = sum(c.params["eps"] for c in approx)
    extra_delta = sum(c.params["delta"] for c in approx)
    if "rdp_sanitized" in keys:
        order = float(report.value("release_order"))
        rdp = float(report.value("rdp_sanitized")) + float(report.value("release_rdp_cost"))
        for c in earlier:
            if c.kind != "approx":
                curve = composition.rdp(c, [order])
                rdp += math.inf if curve is None else float(curve[0])
        sanitised = (float(eps_from_rdp([order], [rdp], delta, conversion)[0]) if math.isfinite(rdp)
                     else math.inf) + extra_eps
    else:
        sanitised = float(report.value("eps")) + extra_eps
    independent = composition.compose(every, delta, conversion=conversion).eps
    routes = {"sanitised data-dependent, both rounds": sanitised, "data-independent, every release": independent}
    route = min(routes, key=routes.get)
    return Cumulative(routes[route], float(report.value("delta_total")) + extra_delta, route, routes)
