"""bench/ssl_teachers.py: the semi-supervised-teacher harness on the tiny data set."""

from __future__ import annotations

import json

import pytest

from conftest import TINY, bench_module


def _bench():
    return bench_module("ssl_teachers")


def test_variant_keeps_the_teacher_model_and_applies_overrides(tiny_config):
    bench = _bench()
    cfg = bench.teacher_loop_config(tiny_config, "method=supervised,threshold=0.9,conv_features=[4]", 80)
    assert cfg.method == "supervised" and cfg.threshold == 0.9 and cfg.conv_features == (4,)
    assert cfg.conv_kernels == tiny_config.teachers.conv_kernels
    assert cfg.learning_rate == tiny_config.teachers.learning_rate
    # As many steps as the teacher's epochs over its shard.
    assert cfg.steps == round(tiny_config.teachers.epochs * 80 / tiny_config.teachers.batch_size)
    with pytest.raises(SystemExit, match="unknown"):
        bench.teacher_loop_config(tiny_config, "nonsense=1", 80)


@pytest.mark.slow  # a research harness end to end; its parts have fast tests
def test_runs_on_the_tiny_data(capsys):
    bench = _bench()
    assert bench.main(["--config", str(TINY), "--teachers", "2", "--variants", "method=supervised",
                       "method=fixmatch,steps=10"]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["method"] for r in rows] == ["supervised", "fixmatch"]
    assert rows[1]["steps"] == 10 and rows[0]["shard_size"] == 480 // 6
    for r in rows:
        assert len(r["accuracy"]) == 2 and 0.0 <= r["mean_accuracy"] <= 1.0
    assert "| method=fixmatch,steps=10 | 10 |" in out and "plurality of 2" in out


@pytest.mark.slow  # a research harness's internals (the fast suite is near its 7 minutes)
def test_the_vote_of_one_teacher_is_that_teacher(capsys):
    bench = _bench()
    assert bench.main(["--config", str(TINY), "--teachers", "1", "--variants", "method=supervised,steps=5"]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["ensemble_accuracy"] == row["accuracy"][0] == row["mean_accuracy"]
