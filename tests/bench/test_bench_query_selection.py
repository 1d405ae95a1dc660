"""bench/query_selection.py: a thin harness over `pate label --round 2`, on the tiny run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import bench_module


def _bench():
    return bench_module("query_selection")


@pytest.mark.slow  # a research harness end to end; its parts have fast tests
def test_runs_on_the_tiny_run(finished_tiny, tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "round2"
    assert bench.main(["--workdir", str(finished_tiny), "--queries", "30", "--modes", "uncertain", "next",
                       "--out", str(out)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["mode"] for r in rows] == ["uncertain", "next"]
    for r in rows:
        assert r["num_queries"] == 30 and 0 <= r["num_answered"] <= 30
        assert r["eps_round2_labels_data_independent"] > 0
    first, second = np.load(finished_tiny / "labels.npz"), np.load(out / "labels-round2.npz")
    assert not set(first["indices"].tolist()) & set(second["indices"].tolist())  # never re-asks round 1
    assert not (out / "teachers").exists()  # round 2 never reads the round-1 teachers
    assert not (finished_tiny / "labels-round2.npz").exists()  # the run itself is left alone
