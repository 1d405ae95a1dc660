"""bench/query_selection.py: round-2 queries chosen by the round-1 student, on the tiny run."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("bench_query_selection", ROOT / "bench" / "query_selection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_select_against_a_plain_loop():
    bench = _bench()
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=50)
    candidates = np.arange(100, 150)
    n = 7
    top = [max(row) for row in probs]
    gap = [sorted(row)[-1] - sorted(row)[-2] for row in probs]
    loop_uncertain = [candidates[i] for i in sorted(range(50), key=lambda i: top[i])[:n]]
    loop_margin = [candidates[i] for i in sorted(range(50), key=lambda i: gap[i])[:n]]
    assert bench.select(probs, candidates, n, "uncertain").tolist() == loop_uncertain
    assert bench.select(probs, candidates, n, "margin").tolist() == loop_margin
    assert bench.select(probs, candidates, n, "next").tolist() == list(range(100, 107))
    with pytest.raises(ValueError):
        bench.select(probs, candidates, n, "random")


def test_runs_on_the_tiny_run(finished_tiny, tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "round2"
    assert bench.main(["--workdir", str(finished_tiny), "--queries", "30", "--row", "3:1:1",
                       "--modes", "uncertain", "next", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["mode"] for r in rows] == ["uncertain", "next"]
    first = np.load(finished_tiny / "labels.npz")
    for r in rows:
        assert r["round2_queries"] == 30 and 0 <= r["round2_answered"] <= 30
        assert r["answered_both_rounds"] == int(np.sum(first["labels"] >= 0)) + r["round2_answered"]
        assert r["expected_headline_eps"] > 0
    both = np.load(out / "labels.npz")
    assert both["indices"].size == first["indices"].size + 30
    assert np.unique(both["indices"]).size == both["indices"].size  # round 2 never re-asks round 1
    assert (out / "config.toml").exists()
