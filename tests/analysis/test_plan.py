"""analysis.planning.plan and `pate plan`: closed-form calibration against bisection on the forward
ε, impossible budgets, and the command line."""

import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.bounds import gnmax
from analysis.bounds import lnmax
from analysis.planning import plan as plan_mod
from analysis.core.errors import PateError
from analysis.accounting.rdp import DEFAULT_ORDERS

# --------------------------------------------------------------------------- second implementations


def loop_lnmax_eps(n, gamma, delta, moments=range(1, 9)):
    """PATE 2017 data-independent moments accountant, one moment at a time."""
    return min((n * min(2 * gamma**2 * l * (l + 1), 2 * gamma * l) + math.log(1 / delta)) / l for l in moments)


def bisect_log(f_eps, target, lo, hi, decreasing, iters=200):
    """Bisection in log space for the boundary f_eps(x) = target; returns the feasible end."""
    a, b = math.log(lo), math.log(hi)
    for _ in range(iters):
        mid = 0.5 * (a + b)
        ok = f_eps(math.exp(mid)) <= target
        if decreasing:  # ε falls with x (σ): feasible above the boundary
            a, b = (a, mid) if ok else (mid, b)
        else:  # ε rises with x (γ): feasible below
            a, b = (mid, b) if ok else (a, mid)
    return math.exp(b if decreasing else a)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 20_000), eps=st.floats(0.2, 20.0), logdelta=st.floats(-12, -2),
       conversion=st.sampled_from(["classic", "improved"]))
def test_gnmax_sigma_matches_bisection(n, eps, logdelta, conversion):
    delta = 10**logdelta
    try:
        p = plan_mod.plan("gnmax", n, eps, delta, conversion=conversion)
    except PateError:
        c = (-math.log(delta) / (DEFAULT_ORDERS - 1)).min()
        assert conversion == "classic" and eps <= c
        return
    want = bisect_log(lambda s: gnmax.data_independent_eps(n, s, delta, conversion=conversion).eps, eps,
                      1e-6, 1e12, decreasing=True)
    assert p.noise["sigma"] == pytest.approx(want, rel=1e-7)
    assert p.eps <= eps


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 20_000), eps=st.floats(0.5, 30.0), logdelta=st.floats(-12, -2))
def test_lnmax_gamma_matches_bisection(n, eps, logdelta):
    delta = 10**logdelta
    if eps <= math.log(1 / delta) / 8:
        with pytest.raises(PateError, match="no LNMax noise"):
            plan_mod.plan("lnmax", n, eps, delta)
        return
    p = plan_mod.plan("lnmax", n, eps, delta)
    want = bisect_log(lambda gm: loop_lnmax_eps(n, gm, delta), eps, 1e-12, 1e6, decreasing=False)
    assert p.noise["gamma"] == pytest.approx(want, rel=1e-7)
    assert p.eps == pytest.approx(loop_lnmax_eps(n, p.noise["gamma"], delta), rel=1e-12)
    assert p.eps <= eps


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 5000), eps=st.floats(0.5, 10.0), ratio=st.floats(0.5, 20.0), frac=st.floats(0, 1))
def test_confident_sigmas_match_bisection(n, eps, ratio, frac):
    a = int(frac * n)
    p = plan_mod.plan("confident-gnmax", n, eps, 1e-5, threshold=100, sigma_ratio=ratio, num_answered=a)
    s2 = p.noise["sigma"]
    assert p.noise["sigma_threshold"] == pytest.approx(ratio * s2)
    want = bisect_log(
        lambda s: gnmax.data_independent_eps(n, s, 1e-5, sigma_threshold=ratio * s, num_answered=a).eps,
        eps, 1e-6, 1e12, decreasing=True)
    assert s2 == pytest.approx(want, rel=1e-7)


# --------------------------------------------------------------------------- known values, limits


def test_known_values():
    # lnmax docstring: 100 queries, γ = 0.05, δ = 1e-5, l ≤ 8 → ε ≈ 5.30; planning for that ε gives γ back
    e = lnmax.data_independent_eps(100, 0.05, 1e-5).eps
    assert plan_mod.plan("lnmax", 100, e, 1e-5).noise["gamma"] == pytest.approx(0.05, rel=1e-9)
    # GNMax: one answer at σ: λ/σ² + log(1/δ)/(λ−1) is minimised at λ* = 1 + σ√(log(1/δ)); with all
    # orders available ε = 1/σ² + 2√(log(1/δ))/σ. Our grid is finite, so ε(σ) is at least that.
    p = plan_mod.plan("gnmax", 1, 1.0, 1e-5)
    s = p.noise["sigma"]
    assert 1 / s**2 + 2 * math.sqrt(math.log(1e5)) / s <= 1.0 + 1e-12
    assert s == pytest.approx((math.sqrt(math.log(1e5)) + math.sqrt(math.log(1e5) + 1)), rel=2e-3)


def test_impossible_budgets_say_so():
    with pytest.raises(PateError, match="no LNMax noise meets eps=1 .*log\\(1/delta\\)/8"):
        plan_mod.plan("lnmax", 10, 1.0, 1e-5)
    with pytest.raises(PateError, match="no Gaussian noise .*classic"):
        plan_mod.plan("gnmax", 10, 0.01, 1e-5)
    # the improved conversion reaches any ε > 0, with a lot of noise
    p = plan_mod.plan("gnmax", 10, 0.01, 1e-5, conversion="improved")
    assert p.eps <= 0.01 and p.noise["sigma"] > 1000
    # many queries only need more noise, never become impossible
    p = plan_mod.plan("gnmax", 10**9, 1.0, 1e-5, num_teachers=250)
    assert p.noise["sigma"] > 1e5 and any("exceeds the 250 teachers" in n for n in p.notes)


def test_votes_add_the_data_dependent_eps_of_the_same_noise():
    rng = np.random.default_rng(0)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.ones(10) * 0.1)) for _ in range(300)])
    p = plan_mod.plan("gnmax", 200, 2.0, 1e-5, votes=votes)
    dd = gnmax.data_dependent_eps(votes[:200], p.noise["sigma"], 1e-5)
    assert p.data_dependent_eps == pytest.approx(dd.eps) and p.data_dependent_eps <= p.eps
    p = plan_mod.plan("confident-gnmax", 200, 2.0, 1e-5, threshold=180, votes=votes)
    assert p.expected_answered is not None and p.data_dependent_eps <= p.eps
    p = plan_mod.plan("lnmax", 200, 8.0, 1e-5, votes=votes)
    assert p.data_dependent_eps == pytest.approx(lnmax.data_dependent_eps(votes[:200], p.noise["gamma"], 1e-5).eps)
    with pytest.raises(PateError, match="fewer than --queries"):
        plan_mod.plan("gnmax", 400, 2.0, 1e-5, votes=votes)
    with pytest.raises(PateError, match="do not sum"):
        plan_mod.plan("gnmax", 200, 2.0, 1e-5, votes=votes, num_teachers=200)


@pytest.mark.parametrize(
    "args",
    [
        dict(mechanism="magic", num_queries=10, eps=1.0, delta=1e-5),
        dict(mechanism="gnmax", num_queries=0, eps=1.0, delta=1e-5),
        dict(mechanism="gnmax", num_queries=10, eps=-1.0, delta=1e-5),
        dict(mechanism="gnmax", num_queries=10, eps=1.0, delta=1.5),
        dict(mechanism="gnmax", num_queries=10, eps=1.0, delta=1e-5, threshold=3),
        dict(mechanism="confident-gnmax", num_queries=10, eps=1.0, delta=1e-5),
        dict(mechanism="confident-gnmax", num_queries=10, eps=1.0, delta=1e-5, threshold=3, num_answered=11),
    ],
)
def test_bad_arguments_raise_pate_error(args):
    with pytest.raises(PateError):
        plan_mod.plan(**args)


# --------------------------------------------------------------------------- CLI


@pytest.fixture()
def cli_main():
    import cli

    return cli.main


def run(cli_main, *args):
    return CliRunner().invoke(cli_main, list(args))


def test_cli_plan_prints_noise_and_eps(cli_main, tmp_path):
    r = run(cli_main, "plan", "--mechanism", "gnmax", "--queries", "1000", "--eps", "2", "--delta", "1e-5")
    assert r.exit_code == 0, r.output
    assert "sigma" in r.output and "eps (data-indep) 2   at order" in r.output
    rng = np.random.default_rng(0)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.ones(10) * 0.1)) for _ in range(50)])
    path = tmp_path / "votes.npz"
    np.savez(path, votes=votes)
    r = run(cli_main, "plan", "--mechanism", "confident-gnmax", "--queries", "50", "--eps", "2",
            "--threshold", "200", "--teachers", "250", "--votes", str(path), "--on-private-votes", "--ledger", "mine")
    assert r.exit_code == 0, r.output
    assert "sigma_threshold" in r.output and "PRIVATE" in r.output and "expected answers" in r.output


def test_plan_on_private_votes_is_refused_unless_recorded(cli_main, tmp_path):
    """Tuning a release's noise on the private votes once went uncharged and unsaid: no eps
    covers parameters chosen on private values. Refused by default (usage: plan on a public
    proxy); with --on-private-votes the choice is recorded in the data set's ledger, which
    `pate ledger` and every later release.json then show."""
    from pate.store import ledger as ledger_mod
    from pate.store.identity import default_directory

    path = tmp_path / "votes.npz"
    np.savez(path, votes=np.full((20, 10), 25))
    base = ["plan", "--mechanism", "gnmax", "--queries", "10", "--eps", "2", "--votes", str(path)]
    refused = run(cli_main, *base)
    assert refused.exit_code == 2 and "public proxy" in refused.output and "--on-private-votes" in refused.output
    book = ledger_mod.Ledger("mine", default_directory())
    assert not book.exists()
    ok = run(cli_main, *base, "--on-private-votes", "--ledger", "mine")
    assert ok.exit_code == 0, ok.output
    assert [e["kind"] for e in book.entries()] == ["private-tuning"] and book.tuned_on_private_data()
    assert book.summary(1e-5)["parameters_chosen_on_private_data"] is True
    assert "chosen on the private votes" in ledger_mod.render(book, 1e-5)


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--mechanism", "confident-gnmax", "--queries", "10", "--eps", "1"], 2, "--threshold is required"),
        (["--mechanism", "gnmax", "--queries", "10", "--eps", "1", "--threshold", "5"], 2, "apply to a threshold step"),
        (["--mechanism", "gnmax", "--queries", "0", "--eps", "1"], 2, "at least 1"),
        (["--mechanism", "gnmax", "--queries", "10", "--eps", "-1"], 2, "positive"),
        (["--mechanism", "lnmax", "--queries", "10", "--eps", "1"], 1, "no LNMax noise"),
        (["--mechanism", "gnmax", "--queries", "10", "--eps", "1", "--votes", "missing.npz"], 1, "does not exist"),
    ],
)
def test_cli_plan_errors(cli_main, args, code, message):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "cli", "plan", *args], capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1


def test_plan_numbers_readable():
    from cli import main

    """Integers as integers, no 310-digit eps, delta with the digits that matter (issue 12)."""
    from analysis.planning.plan import number, probability

    assert number(3000.0) == "3000" and number(2.5) == "2.5000" and number(1e308) == "1.0000e+308"
    assert number(1.5e-7) == "1.5000e-07" and probability(0.999999) == "0.999999"
    r = CliRunner().invoke(main, ["plan", "--mechanism", "gnmax", "--queries", "100", "--eps", "2",
                                  "--delta", "0.999999"])
    assert "delta=0.999999" in r.output
    # a bad option exits 2 (the eps bound is the option's), a value the planner refuses 1
    for extra, code in ((["--eps", "1e308"], 2), (["--eps", "3", "--threshold", "3", "--sigma-ratio", "1e308"], 1)):
        mech = "confident-gnmax" if "--threshold" in extra else "lnmax"
        r = CliRunner().invoke(main, ["plan", "--mechanism", mech, "--queries", "1", *extra])
        assert r.exit_code == code and "must" in r.stderr and "Traceback" not in r.output
