"""bench/release_noise.py --simulate: release settings chosen on votes drawn from a public
model (no data read), the procedure behind the default release settings."""

from __future__ import annotations

import importlib.util
import json

import numpy as np

from conftest import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("bench_release_noise", ROOT / "bench" / "release_noise.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_simulated_votes_follow_the_stated_model():
    bench = _bench()
    rng = np.random.default_rng(0)
    votes, truth = bench.simulate_votes(rng, 4000, 50, 10, 0.7, 2.0, 0.5)
    assert votes.shape == (4000, 10) and (votes.sum(axis=1) == 50).all()
    right = votes[np.arange(4000), truth] / 50.0
    assert abs(right.mean() - 0.7) < 0.02  # mean teacher accuracy
    assert 0.065 < right.var() < 0.08  # Beta(1.4, 0.6): 0.07, plus the multinomial's 0.14 / 50
    votes2, _ = bench.simulate_votes(np.random.default_rng(0), 4000, 50, 10, 0.7, 2.0, 0.5)
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
