"""A target for both rounds (issue 22): round 2 planned from round 1's published RDP so
that the sum of both rounds' sanitised RDPs (`analysis.rounds.diagnostics`; not the headline
since issue 32) is within the target with the planned probability — the plan's algebra
against a Monte Carlo of that figure as the analysis reports it, the plan's inputs public,
and the refusals."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from analysis import gnss, headline_target, mechanisms
from analysis.errors import PateError
from analysis.rdp import eps_curve
from analysis.rounds import diagnostics
from analysis.simulated_votes import VoteModel
from pate.release import target as release_target
from pate.config import load_config

from conftest import ROOT

DELTA, ORDER, CONVERSION = 1e-5, 12.0, "improved"


def _conv(rdp: float) -> float:
    return float(eps_curve([ORDER], [[rdp]], DELTA, CONVERSION)[0, 0])


@pytest.mark.parametrize("f, ss, offset", [(0.30, 0.02, 0.558), (0.15, 0.05, 0.8), (0.6, 0.01, 0.3)])
def test_later_round_probability_against_monte_carlo_of_the_rdp_sum(f, ss, offset):
    """P[sum of both rounds' sanitised RDPs ≤ target] as planned (the release with its cost
    raised by round 1's published RDP, no data-independent cap) against draws of round 2's
    GNSS release fed to `analysis.rounds.diagnostics`, the function `pate analyze` reports
    that figure with (a diagnostic: the headline of both rounds is the data-independent
    composition): the same probability within Monte Carlo error."""
    release = headline_target.release_parameters(ORDER, 0.025, 0.1)
    target = 2.0
    shifted = dataclasses.replace(release, cost=release.cost + offset)
    planned, _ = headline_target.release_outcome(f, ss, shifted, math.inf, target, DELTA, CONVERSION)
    _, std = gnss.noise_units(ss, gnss.RELEASE_GRID, release.sigma_ss)
    reach = int(12 * std) + 2
    support = np.arange(-reach, reach + 1)
    pmf = np.exp(-0.5 * (support / std) ** 2)
    rng = np.random.default_rng(0)
    draws = 20000
    z = rng.choice(support, size=draws, p=pmf / pmf.sum())
    first = {"eps": _conv(offset), "delta": DELTA, "rdp_sanitized": offset - 0.05, "release_rdp_cost": 0.05,
             "release_order": ORDER}
    within = 0
    for value in np.unique(z):
        sanitised = gnss.RELEASE_GRID * max(0, int(round(f / gnss.RELEASE_GRID)) + int(value))
        second = {"eps": _conv(sanitised + release.cost), "delta": DELTA, "rdp_sanitized": sanitised,
                  "release_rdp_cost": release.cost, "release_order": ORDER}
        within += int(np.sum(z == value)) * (diagnostics(first, second, DELTA, CONVERSION)["rdp"] <= target)
    p_hat, se = within / draws, math.sqrt(planned * (1 - planned) / draws) + 1e-4
    assert abs(p_hat - planned) <= 5 * se, (p_hat, planned)


def test_offset_lowers_the_queries_and_moves_nothing_else():
    """Round 1's published RDP leaves round 2 fewer queries; no offset is round 1's plan."""
    record = mechanisms.from_config(load_config(ROOT / "configs" / "fashion_mnist.toml").aggregation)
    model = VoteModel(500, 10, accuracy=0.7)
    kw = dict(model=model, conversion=CONVERSION, orders=(ORDER,))
    alone = headline_target.choose_release(record, 1600, 2.0, DELTA, **kw)
    later = headline_target.choose_release(record, 1600, 2.0, DELTA, offset=0.558, **kw)
    assert later.num_queries < alone.num_queries and later.offset_rdp == 0.558 and alone.offset_rdp == 0.0
    assert later.order == ORDER and later.probability >= 0.95
    assert headline_target.ReleaseChoice.from_meta(later.meta()) == later
    # a plan written before the offset existed reads as a plan without one
    old = {k: v for k, v in alone.meta().items() if k != "offset_rdp"}
    assert headline_target.ReleaseChoice.from_meta(old) == alone
    # the report's probability of the planned release is the plan's
    p, _, _, _ = headline_target.headline_probability(
        record, later.num_queries, headline_target.release_parameters(later.order, later.beta, later.release_cost),
        2.0, DELTA, model=model, conversion=CONVERSION, offset=0.558)
    assert p == pytest.approx(later.probability, abs=1e-3)  # votes drawn for this count, not all 1600
    with pytest.raises(PateError, match="one order"):
        headline_target.choose_release(record, 1600, 2.0, DELTA, model=model, offset=0.5)
    with pytest.raises(PateError, match="after round 1"):
        headline_target.choose_release(record, 1600, 2.0, DELTA, offset=1.5, **kw)


def _fashion(**rounds):
    cfg = load_config(ROOT / "configs" / "fashion_mnist.toml")
    return dataclasses.replace(cfg, rounds=dataclasses.replace(cfg.rounds, rounds=2, **rounds))


def test_choose_round2_reads_round1_published_values_only():
    first = {"eps": 1.29, "details": {"rdp_sanitized": 0.508, "release_rdp_cost": 0.05, "release_order": 12.0}}
    choice = release_target.choose_round2(_fashion(queries=3000), 500, 10, first, echo=lambda *_: None)
    assert choice.offset_rdp == pytest.approx(0.558) and choice.order == 12.0
    assert 0 < choice.num_queries <= 3000 and choice.probability >= 0.95
    # the round-1 part of the target
    assert release_target.round1_target(_fashion(round1_target_eps=1.2)) == 1.2
    assert release_target.round1_target(_fashion()) == 2.0
    with pytest.raises(PateError, match="round1_target_eps"):
        release_target.round1_target(_fashion(round1_target_eps=2.5))
    with pytest.raises(PateError, match="GNSS release"):  # LNMax's round 1: no RDP at one order
        release_target.choose_round2(_fashion(), 500, 10, {"eps": 1.0, "details": {"eps_sanitized": 1.0}})
    off = dataclasses.replace(_fashion(), privacy=dataclasses.replace(_fashion().privacy, target_eps=0.0))
    assert release_target.choose_round2(off, 500, 10, first) is None


def test_round2_is_refused_when_round1_alone_spends_the_target_data_independently():
    """The headline of both rounds is their data-independent composition: a round 1 whose own
    data-independent figure (labels + sanitised draw) reaches the target leaves no round 2,
    however low its sanitised RDP."""
    first = {"eps": 1.29, "details": {"rdp_sanitized": 0.508, "release_rdp_cost": 0.05, "release_order": 12.0,
                                      "eps_data_independent_with_release": 4.8}}
    with pytest.raises(PateError, match="no round 2 fits privacy.target_eps = 2"):
        release_target.choose_round2(_fashion(queries=3000), 500, 10, first, echo=lambda *_: None)
    first["details"]["eps_data_independent_with_release"] = 1.5
    assert release_target.choose_round2(_fashion(queries=3000), 500, 10, first, echo=lambda *_: None) is not None
