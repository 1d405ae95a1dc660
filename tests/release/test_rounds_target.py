"""A target for both rounds (issue 22): round 2 planned from round 1's published RDP so
that the sum of both rounds' sanitised RDPs (`analysis.planning.rounds.diagnostics`; not the headline
since issue 32) is within the target with the planned probability — the plan's algebra
against a Monte Carlo of that figure as the analysis reports it, the plan's inputs public,
and the refusals."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from analysis.sanitised import gnss
from analysis.planning import headline_target
from analysis.mechanisms import registry
from analysis.core.errors import PateError
from analysis.accounting.rdp import eps_curve
from analysis.planning.rounds import diagnostics
from analysis.planning.simulated_votes import VoteModel
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
    GNSS release fed to `analysis.planning.rounds.diagnostics`, the function `pate analyze` reports
    that figure with (a diagnostic: the headline of both rounds is the data-independent
    composition): the same probability within Monte Carlo error."""
    release = headline_target.release_parameters(ORDER, 0.1 / ORDER, 0.3)
    shifted = dataclasses.replace(release, cost=release.cost + offset)
    # the sanitised RDP is an upper bound (issue 51): its centre is f moved up by a S~
    centre, std = gnss.release_centre(f, ss, gnss.RELEASE_GRID, gnss.upper_bound(release.sigma_ss, release.beta, DELTA))
    target = _conv(centre * gnss.RELEASE_GRID + release.cost + offset)  # where the release noise decides
    planned, _ = headline_target.release_outcome(f, ss, shifted, math.inf, target, DELTA, CONVERSION)
    assert 0.2 < planned < 0.8
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
        sanitised = gnss.RELEASE_GRID * max(0, centre + int(value))
        second = {"eps": _conv(sanitised + release.cost), "delta": DELTA, "rdp_sanitized": sanitised,
                  "release_rdp_cost": release.cost, "release_order": ORDER}
        within += int(np.sum(z == value)) * (diagnostics(first, second, DELTA, CONVERSION)["rdp"] <= target)
    p_hat, se = within / draws, math.sqrt(planned * (1 - planned) / draws) + 1e-4
    assert abs(p_hat - planned) <= 5 * se, (p_hat, planned)


def test_offset_lowers_the_queries_and_moves_nothing_else():
    """Round 1's published RDP leaves round 2 fewer queries; no offset is round 1's plan."""
    record = registry.from_config(load_config(ROOT / "configs" / "fashion_mnist.toml").aggregation)
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
        2.0, DELTA, model=model, conversion=CONVERSION, offset=0.558, max_queries=1600)
    assert p == pytest.approx(later.probability, abs=1e-3)  # the plan's ensembles: drawn for all 1600 queries
    with pytest.raises(PateError, match="one order"):
        headline_target.choose_release(record, 1600, 2.0, DELTA, model=model, offset=0.5)
    with pytest.raises(PateError, match="after round 1"):
        headline_target.choose_release(record, 1600, 2.0, DELTA, offset=1.5, **kw)


def _fashion(**rounds):
    cfg = load_config(ROOT / "configs" / "fashion_mnist.toml")
    return dataclasses.replace(cfg, rounds=dataclasses.replace(cfg.rounds, rounds=2, **rounds))


def _round1_costs(record, queries: int = 400) -> list:
    """Round 1's labels and sanitised draw (order 12, β 0.1/12, cost 0.2), as the headline counts them."""
    from analysis.mechanisms import composition

    release = headline_target.release_parameters(ORDER, 0.1 / ORDER, 0.2)
    return [composition.labels_cost(record, queries),
            record.sanitised_cost({"release_order": ORDER, "beta": release.beta}, 0.2)]


FIRST = {"eps": 1.29, "details": {"rdp_sanitized": 0.508, "release_rdp_cost": 0.05, "release_order": ORDER}}


def test_choose_round2_reads_round1_published_values_only():
    cfg = _fashion(queries=3000)
    record = registry.from_config(cfg.aggregation)
    choice = release_target.choose_round2(cfg, 500, 10, FIRST, earlier=_round1_costs(record), echo=lambda *_: None)
    assert choice.order == ORDER and choice.route == headline_target.DATA_INDEPENDENT
    assert 0 < choice.num_queries <= 3000 and choice.eps_data_independent <= 2.0
    assert headline_target.ReleaseChoice.from_meta(choice.meta()) == choice
    # the round-1 part of the target
    assert release_target.round1_target(_fashion(round1_target_eps=1.2)) == 1.2
    assert release_target.round1_target(_fashion()) == 2.0
    with pytest.raises(PateError, match="round1_target_eps"):
        release_target.round1_target(_fashion(round1_target_eps=2.5))
    with pytest.raises(PateError, match="GNSS release"):  # LNMax's round 1: no release order
        release_target.choose_round2(_fashion(), 500, 10, {"eps": 1.0, "details": {"eps_sanitized": 1.0}},
                                     earlier=[])
    off = dataclasses.replace(_fashion(), privacy=dataclasses.replace(_fashion().privacy, target_eps=0.0))
    assert release_target.choose_round2(off, 500, 10, FIRST, earlier=[]) is None


def test_round2_is_refused_when_round1_alone_spends_the_target_data_independently():
    """The headline of both rounds is their data-independent composition: a round 1 whose
    releases compose to the target (1600 queries: eps 3.9) leaves no round 2, however low its
    sanitised RDP; one line, naming the setting."""
    cfg = _fashion(queries=3000)
    record = registry.from_config(cfg.aggregation)
    with pytest.raises(PateError, match="no round 2 fits privacy.target_eps = 2") as err:
        release_target.choose_round2(cfg, 500, 10, FIRST, earlier=_round1_costs(record, 1600), echo=lambda *_: None)
    assert "\n" not in str(err.value) and "rounds.rounds = 1" in str(err.value)


def test_round2_plan_meets_the_published_headline_of_both_rounds_and_no_more():
    """Round 2 was planned for the sum of both rounds' sanitised RDPs, which is not what is
    published. The plan now solves for the published headline of both rounds
    (`analysis.planning.rounds.cumulative_headline`, the function `pate analyze` publishes with): at the
    planned queries and release it is <= the target; one more query, even with the cheapest
    release of every beta on the grid that can publish its upper bound, exceeds it; so does the
    next larger release cost."""
    from analysis.mechanisms import composition
    from analysis.planning.rounds import cumulative_headline

    cfg = _fashion(queries=3000)
    record = registry.from_config(cfg.aggregation)
    earlier = _round1_costs(record)
    choice = release_target.choose_round2(cfg, 500, 10, FIRST, earlier=earlier, echo=lambda *_: None)
    target, n = cfg.privacy.target_eps, choice.num_queries

    def headline(queries, order, beta, cost):
        released = record.sanitised_cost({"release_order": order, "beta": beta}, cost)
        every = [*earlier, composition.labels_cost(record, queries), released]
        return cumulative_headline({}, {}, every, DELTA, cfg.privacy.conversion).eps

    planned = headline(n, choice.order, choice.beta, choice.release_cost)
    assert planned <= target and planned == pytest.approx(choice.eps_data_independent, abs=1e-9)
    assert 0 < n < 3000
    assert _publishable(headline_target.release_parameters(choice.order, choice.beta, choice.release_cost))
    for times in headline_target.BETA_TIMES_ORDER:
        for cost in sorted(headline_target.COSTS):  # the cheapest publishable release this beta can make
            release = _release_or_none(ORDER, times / ORDER, cost)
            if release is None or not _publishable(release):
                continue
            assert headline(n + 1, ORDER, times / ORDER, cost) > target, (times, cost)
            break
    larger = [c for c in headline_target.COSTS if c > choice.release_cost]
    if larger:
        assert headline(n, choice.order, choice.beta, min(larger)) > target


def _release_or_none(order, beta, cost):
    try:
        return headline_target.release_parameters(order, beta, cost)
    except (PateError, ValueError, ZeroDivisionError):  # no sigma_ss spends that little at this beta
        return None


def _publishable(release) -> bool:
    try:
        gnss.upper_bound(release.sigma_ss, release.beta, DELTA)  # as `pate analyze` publishes it (eta = delta)
    except PateError:
        return False
    return True


@pytest.mark.parametrize("target", [2.0, 3.0])
def test_round2_plan_chooses_only_a_release_that_can_publish_its_upper_bound(target):
    """`pate analyze` publishes the sanitised value as an upper bound that fails with
    probability delta, which a release with sigma_ss z(1 - delta) (e^beta - 1) >= 1 cannot do.
    The plan chose one at every target (beta 0.3/12, cost 0.02, sigma_ss 43.5): round 2's labels
    were released and charged, then `pate analyze` refused. Now the planned release can publish
    its bound, the published headline of both rounds is within the target, and no publishable
    release of the grid fits one more query, nor a larger cost of the planned beta."""
    from analysis.planning.rounds import plan_round2, round2_headline_eps

    cfg = _fashion(queries=3000)
    record = registry.from_config(cfg.aggregation)
    earlier, conversion = _round1_costs(record), cfg.privacy.conversion
    plan = plan_round2(record, 3000, earlier, target, DELTA, order=ORDER, conversion=conversion)
    assert plan is not None and 0 < plan.num_queries < 3000
    assert _publishable(plan.release) and plan.eps <= target

    def headline(queries, release):
        cost = record.sanitised_cost({"release_order": ORDER, "beta": release.beta}, release.release_cost)
        return round2_headline_eps(record, queries, cost, earlier, DELTA, conversion)

    assert plan.eps == headline(plan.num_queries, plan.release)
    grid = [[r for r in (_release_or_none(ORDER, times / ORDER, c) for c in sorted(headline_target.COSTS))
             if r is not None and _publishable(r)] for times in headline_target.BETA_TIMES_ORDER]
    assert all(grid)  # every beta has a publishable release on the grid
    assert all(headline(plan.num_queries + 1, releases[0]) > target for releases in grid)  # each beta's cheapest
    larger = [r for releases in grid for r in releases
              if r.beta == plan.release.beta and r.release_cost > plan.release.release_cost]
    assert all(headline(plan.num_queries, r) > target for r in larger)
