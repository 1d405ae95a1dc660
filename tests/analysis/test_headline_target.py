"""A headline that meets its target (analysis.planning.headline_target, pate.release.target): the
prefix profiles against total_profile, P[headline <= target] against Monte Carlo over the
real release (analysis.sanitised.gnss.sanitized_eps with exact discrete Gaussian noise), the
>= 95 % property on fresh simulated ensembles, and the chooser reading public values only
(before any teacher votes, in `pate label`)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from analysis.sanitised import gnss
from analysis.planning import headline_target
from analysis.core.errors import PateError
from analysis.sanitised.gnmax_sensitivity import prefix_profiles, total_profile
from analysis.mechanisms.noisy_max import ConfidentGNMax, GNMax, LNMax
from analysis.core.noise import RELEASE_STREAM, NoiseSource
from analysis.planning.simulated_votes import VoteModel

RECORD = ConfidentGNMax(80.0, 40.0, 20.0)  # 100 simulated teachers
MODEL = VoteModel(100, 10)


@pytest.mark.parametrize("record", [RECORD, GNMax(20.0)])
def test_prefix_profiles_equal_total_profile_on_every_prefix(record):
    votes = MODEL.draw(7, 90)
    ends = [1, 7, 40, 41, 90]
    kw = dict(threshold=record.threshold, sigma_threshold=record.sigma_threshold) if hasattr(record, "threshold") else {}
    F, f = prefix_profiles(votes, record.sigma, 10.0, 100, ends, **kw)
    for i, e in enumerate(ends):
        F1, f1 = total_profile(votes[:e], record.sigma, 10.0, 100, answered_mask=None,
                               accounting="joint" if kw else None, **({"threshold": None, "sigma_threshold": None}
                                                                       if not kw else kw))
        np.testing.assert_allclose(F[i], F1, rtol=1e-12, atol=1e-15)
        assert f[i] == pytest.approx(f1, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("cost, target", [(0.5, 18.0), (0.2, 40.0)])
def test_probability_matches_monte_carlo_over_the_release(cost, target):
    """P and E of `release_outcome` against draws of the release: the sampler
    `gnss.sanitized_eps` publishes with (exact discrete Gaussian, grid rounding, the centre shifted
    up to an upper bound, floor at 0), converted as it converts, one full `sanitized_eps` included.
    The data-independent cap is left out (+inf): on these votes the upper bound lies above it."""
    from analysis.accounting.rdp import eps_from_rdp

    votes = MODEL.draw(3, 200)
    order, delta, conv = 12.0, 1e-5, "improved"
    release = headline_target.release_parameters(order, 0.2 / order, cost)
    indep = RECORD.independent_eps(200, delta, conversion=conv)
    di, _ = gnss.gnss_headline_independent(indep, release.beta, release.sigma_ss, delta, conv)
    assert di < target
    di = math.inf
    F, f = total_profile(votes, RECORD.sigma, order, 100, threshold=RECORD.threshold,
                         sigma_threshold=RECORD.sigma_threshold, answered_mask=None, accounting="joint")
    ss = float(np.max(F * np.exp(-release.beta * np.arange(101))))
    p, mean = headline_target.release_outcome(f, ss, release, di, target, delta, conv)
    assert 0.05 < p < 0.98  # a case where the release noise decides
    noise = NoiseSource(11, RELEASE_STREAM)
    one = gnss.sanitized_eps(votes, RECORD.sigma, delta, order, release.beta, release.sigma_ss,
                             threshold=RECORD.threshold, sigma_threshold=RECORD.sigma_threshold, conversion=conv,
                             noise=noise)
    assert one.rdp_exact == pytest.approx(f) and one.smooth_sensitivity == pytest.approx(ss)
    assert one.rdp_gnss == pytest.approx(release.cost)
    bound = gnss.upper_bound(release.sigma_ss, release.beta, delta)
    units = np.array([gnss._draw(f, ss, gnss.RELEASE_GRID, bound, noise)[0] for _ in range(3000)])
    eps = eps_from_rdp([order], (units * gnss.RELEASE_GRID + release.cost)[:, None], delta, conv)[0]
    draws = np.minimum(eps, di)
    tol = 4 * math.sqrt(p * (1 - p) / draws.size)
    assert np.mean(draws <= target) == pytest.approx(p, abs=tol)
    assert draws.mean() == pytest.approx(mean, abs=4 * draws.std() / math.sqrt(draws.size) + 1e-3)


def test_the_data_independent_route_caps_the_headline():
    release = headline_target.release_parameters(12.0, 0.1 / 12, 0.2)
    p, mean = headline_target.release_outcome(5.0, 1.0, release, 1.5, 1.6, 1e-5, "classic")
    assert p == 1.0 and mean <= 1.5 + 1e-12
    # Without the cap the same release is almost surely above the target.
    p, _ = headline_target.release_outcome(5.0, 0.01, release, math.inf, 1.6, 1e-5, "classic")
    assert p < 1e-3


def test_the_screening_sigma_is_the_bisection_sigma():
    for order, times, cost in [(8.0, 0.1, 0.05), (12.0, 0.2, 0.2), (20.0, 0.4, 0.8)]:
        fast = headline_target._screen_release(order, times / order, cost)
        slow = headline_target.release_parameters(order, times / order, cost)
        assert fast.sigma_ss == pytest.approx(slow.sigma_ss, rel=1e-9)


@pytest.fixture(scope="module")
def choice():
    return headline_target.choose_release(RECORD, 300, 2.5, 1e-5, model=MODEL, conversion="improved")


def test_the_choice_meets_the_target_on_fresh_simulated_ensembles(choice):
    """The >= 95 % property: on ensembles the chooser never saw (other seeds of the same
    public model), the exact P over the release noise averages at least the target."""
    assert choice.probability >= 0.95 and choice.num_queries <= 300
    release = headline_target.release_parameters(choice.order, choice.beta, choice.release_cost)
    p, p_min, _, _ = headline_target.headline_probability(RECORD, choice.num_queries, release, 2.5, 1e-5,
                                                           model=MODEL, conversion="improved", ensembles=12,
                                                           seed=1000)
    assert p >= 0.93 and p_min > 0.5  # 12 fresh ensembles: their spread in f is small
    # The chosen release does better than the configured default would for the same queries.
    default = headline_target.release_parameters(12.0, 0.1 / 12, 0.2)
    p_default, *_ = headline_target.headline_probability(RECORD, choice.num_queries, default, 2.5, 1e-5,
                                                          model=MODEL, conversion="improved", seed=1000)
    assert p >= p_default - 1e-9


def test_a_tighter_target_asks_fewer_queries(choice):
    tighter = headline_target.choose_release(RECORD, 300, 2.0, 1e-5, model=MODEL, conversion="improved")
    assert tighter.num_queries < choice.num_queries and tighter.probability >= 0.95
    assert tighter.expected_eps < choice.expected_eps


def test_the_choice_round_trips_through_labels_meta(choice):
    assert headline_target.ReleaseChoice.from_meta(choice.meta()) == choice
    with pytest.raises(PateError, match="incomplete"):
        headline_target.ReleaseChoice.from_meta({"order": 12.0})


def test_the_chooser_takes_public_values_only():
    """No parameter can carry votes: the record, counts, the target, δ, the public model, and
    (Interactive-GNMax) the public student model: its check offsets and its calibration."""
    import dataclasses

    from analysis.planning.simulated_votes import StudentModel

    params = set(inspect.signature(headline_target.choose_release).parameters)
    assert params == {"record", "max_queries", "target", "delta", "model", "conversion", "probability",
                      "ensembles", "seed", "orders", "costs", "betas", "grid", "offset", "student"}
    assert {f.name for f in dataclasses.fields(StudentModel)} == {"offsets", "calibration"}


def test_refusals():
    with pytest.raises(PateError, match="gnmax and confident-gnmax"):
        headline_target.choose_release(LNMax(0.1), 100, 2.0, 1e-5, model=MODEL)
    with pytest.raises(PateError, match="probability"):
        headline_target.choose_release(RECORD, 100, 2.0, 1e-5, model=MODEL, probability=0.3)
    with pytest.raises(PateError, match="no release meets"):
        headline_target.choose_release(RECORD, 100, 0.5, 1e-5, model=MODEL)


def test_label_plans_before_any_vote_and_analyze_reports_the_probability(trained_run, monkeypatch):
    """`pate label --target-eps`: the chooser runs before the teachers vote, with public
    arguments only; labels.npz records the plan, `pate analyze` releases with it and
    release.json reports its probability."""
    import json

    from click.testing import CliRunner

    import cli
    from pate.release import target as release_target
    from pate.programs import voting
    from pate.release.labels import read_labels

    run = trained_run[0]
    calls = []
    real_choose, real_votes = headline_target.choose_release, voting.predict_votes

    def spy_choose(*args, **kwargs):
        calls.append("choose")
        for value in [*args, *kwargs.values()]:
            assert isinstance(value, (int, float, str, ConfidentGNMax, VoteModel)), type(value)
        return real_choose(*args, **kwargs)

    def spy_votes(*args, **kwargs):
        calls.append("votes")
        return real_votes(*args, **kwargs)

    monkeypatch.setattr(headline_target, "choose_release", spy_choose)
    monkeypatch.setattr(voting, "predict_votes", spy_votes)
    labelled = CliRunner().invoke(cli.main, [
        "label", "--workdir", str(run), "--mechanism", "confident-gnmax", "--threshold", "4", "--sigma-threshold",
        "2", "--sigma", "2", "--target-eps", "20", "--seed", "1"])
    assert labelled.exit_code == 0, labelled.output
    assert calls == ["choose", "votes"] and "P[this release's eps <= 20]" in labelled.output
    labels = read_labels(run / "labels.npz")
    plan = release_target.planned(labels)
    assert plan is not None and labels["indices"].size == plan.num_queries and plan.target_eps == 20.0
    assert "target_eps = 20.0" in (run / "config.toml").read_text()
    analyzed = CliRunner().invoke(cli.main, ["analyze", "--workdir", str(run), "--seed", "2"])
    assert analyzed.exit_code == 0, analyzed.output
    details = json.loads((run / "release.json").read_text())["details"]
    assert details["target_eps"] == 20.0 and 0.95 <= details["p_headline_within_target"] <= 1.0
    assert details["release_order"] == plan.order and details["beta"] == plan.beta
    both = CliRunner().invoke(cli.main, ["label", "--workdir", str(run), "--overwrite", "--budget", "30"])
    assert both.exit_code == 1 and "use one" in both.output  # the stored target and --budget


def test_pate_plan_prints_the_choice_and_refuses_mixed_options():
    from click.testing import CliRunner

    import cli
    from conftest import TINY

    noise = ["--set", 'aggregation.mechanism="confident-gnmax"', "--set", "aggregation.threshold=4.0",
             "--set", "aggregation.sigma_threshold=2.0", "--set", "aggregation.sigma=2.0"]
    result = CliRunner().invoke(cli.main, ["plan", "--config", str(TINY), *noise, "--target-eps", "20"])
    assert result.exit_code == 0, result.output
    assert "P[this release's eps <= 20]" in result.output and "no vote of this data set was read" in result.output
    assert "round 2 is planned" not in result.output
    two = CliRunner().invoke(cli.main, ["plan", "--config", str(TINY), *noise, "--set", "rounds.rounds=2",
                                        "--set", "rounds.round1_target_eps=15", "--target-eps", "20"])
    assert two.exit_code == 0 and "P[this release's eps <= 15]" in two.output, two.output  # round 1's part
    assert "round 2 is planned when it starts" in two.output
    mixed = CliRunner().invoke(cli.main, ["plan", "--config", str(TINY), "--eps", "2", "--target-eps", "20"])
    assert mixed.exit_code == 2 and "come from the config" in mixed.output
    bare = CliRunner().invoke(cli.main, ["plan", "--queries", "5"])
    assert bare.exit_code == 2 and "--mechanism, --queries and --eps" in bare.output
    lnmax = CliRunner().invoke(cli.main, ["plan", "--config", str(TINY), "--target-eps", "20"])
    assert lnmax.exit_code == 1 and "gnmax and confident-gnmax" in lnmax.output


def test_config_refuses_a_bad_target(tiny_config):
    import dataclasses

    from analysis.core.errors import PateError as Error

    for key, value in [("target_eps", -1.0), ("target_probability", 1.0), ("target_accuracy", 0.0)]:
        with pytest.raises(Error, match=key):
            dataclasses.replace(tiny_config.privacy, **{key: value}).validate()
