"""bench/release_noise.py: the expected headline of a release, checked against Monte Carlo,
the harness run on the tiny ensemble, and --simulate (release settings chosen on votes
drawn from a public model, no data read: the procedure behind the default settings)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import TINY, bench_module


def _bench():
    return bench_module("release_noise")


@pytest.mark.parametrize("f, s, independent", [(0.9, 1.26, math.inf), (0.6, 0.2, math.inf), (1.5, 0.8, 2.4),
                                                (0.0, 0.5, math.inf)])
def test_expected_headline_matches_monte_carlo(f, s, independent):
    from analysis.accounting.rdp import eps_from_rdp
    from analysis.planning.release_expectation import expected_headline

    mean, tail = expected_headline(f, s, 0.2, 12.0, 1e-5, "classic", independent)
    z = np.random.default_rng(0).standard_normal(200_000)
    conv = float(eps_from_rdp([12.0], [0.0], 1e-5, "classic")[0])  # classic: rdp + log(1/δ)/(λ-1)
    mc = np.minimum(np.maximum(0.0, f + s * z) + 0.2 + conv, independent)
    assert mean == pytest.approx(mc.mean(), abs=3 * mc.std() / math.sqrt(z.size) + 2e-3)
    assert tail == pytest.approx(np.mean(mc > mean + 0.5), abs=0.01)
    assert mean >= min(0.2 + conv, independent) - 1e-12  # never below the floor


def test_runs_on_the_tiny_ensemble(trained_run, capsys):
    run, _ = trained_run
    bench = _bench()
    assert bench.main(["--workdir", str(run), "--config", str(TINY), "--rows", "4:1:1:60", "5:1:1:60",
                       "--draws", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["threshold"] for r in rows] == [4.0, 5.0] and all(r["teachers"] == 6 for r in rows)
    for r in rows:
        assert 0 <= r["answered"] <= 60 and len(r["answered_per_class"]) == 4
        assert r["expected_headline_eps"] >= r["headline_floor"] - 1e-9
        assert r["release_noise_std_rdp"] >= 0
    # A higher threshold answers fewer queries.
    assert rows[1]["answered"] <= rows[0]["answered"]


def test_simulated_votes_follow_the_stated_model():
    from analysis.planning.simulated_votes import simulate_votes

    rng = np.random.default_rng(0)
    votes, truth = simulate_votes(rng, 4000, 50, 10, 0.7, 2.0, 0.5)
    assert votes.shape == (4000, 10) and (votes.sum(axis=1) == 50).all()
    right = votes[np.arange(4000), truth] / 50.0
    assert abs(right.mean() - 0.7) < 0.02  # mean teacher accuracy
    assert 0.065 < right.var() < 0.08  # Beta(1.4, 0.6): 0.07, plus the multinomial's 0.14 / 50
    votes2, _ = simulate_votes(np.random.default_rng(0), 4000, 50, 10, 0.7, 2.0, 0.5)
    assert (votes2 == votes).all()


def test_simulate_reads_no_data_and_picks_within_the_target(capsys, monkeypatch):
    bench = _bench()
    from pate import data

    def no_data(*args, **kwargs):
        raise AssertionError("--simulate must not read a data set")

    monkeypatch.setattr(data, "load_dataset", no_data)
    rows = ["400:200:70:300", "100:200:70:300", "400:50:20:300"]
    assert bench.main(["--simulate", "--teachers", "100", "--draws", "1", "--target", "3.0", "--rows", *rows]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(r["votes"] == "simulated" for r in out[:-1]) and len(out) == 4
    choice = out[-1]["choice"]
    fits = [r for r in out[:-1] if r["expected_headline_eps"] <= 3.0]
    assert choice == max(fits, key=lambda r: r["expected_correct"])
