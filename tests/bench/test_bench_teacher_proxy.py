"""bench/teacher_proxy.py: teacher settings scored on shards of the public pool, never the
private training split."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import TINY, bench_module


def _bench():
    return bench_module("teacher_proxy")


def test_variant_overrides_teacher_keys(tiny_config):
    bench = _bench()
    tc = bench.variant_config(tiny_config.teachers, "epochs=7,conv_features=[4],learning_rate=0.02", 3)
    assert (tc.epochs, tc.conv_features, tc.learning_rate, tc.num_teachers) == (7, (4,), 0.02, 3)
    assert tc.batch_size == tiny_config.teachers.batch_size
    with pytest.raises(SystemExit, match="unknown"):
        bench.variant_config(tiny_config.teachers, "threshold=0.9", 3)


@pytest.mark.slow  # 20 s: trains teachers on the pool
def test_trains_on_the_pool_alone(monkeypatch, capsys):
    """The private training images are replaced by NaN: a proxy that touched them would end
    with a NaN loss. The rows are the pool's K = 200 // 80 = 2 teachers of each variant."""
    from pate import data

    real_split = data.split

    def poisoned(dataset, public_size):
        splits = real_split(dataset, public_size)
        return dataclasses.replace(splits, train_x=np.full_like(splits.train_x, np.nan))

    monkeypatch.setattr(data, "split", poisoned)
    assert _bench().main(["--config", str(TINY), "--variants", "", "epochs=2"]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(r["variant"], r["epochs"], r["teachers"], r["shard_size"]) for r in rows] == \
        [("(config)", 4, 2, 80), ("epochs=2", 2, 2, 80)]
    for r in rows:
        assert np.isfinite(r["final_loss"]) and 0.0 <= r["min_accuracy"] <= r["mean_accuracy"] <= r["max_accuracy"]
        assert 0.0 <= r["ensemble_accuracy"] <= 1.0
    assert "| epochs=2 | 2 × 16 |" in out
