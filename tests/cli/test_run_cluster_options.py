"""`pate run`'s cluster options (`pate.cli.options.cluster`, as train-teachers and label take
them): refused in one line with exit 2 where they cannot apply, before any process joins a
cluster or touches the run directory. The runs themselves: tests/steps/test_run_distributed.py."""

from __future__ import annotations

from conftest import TINY, invoke


def test_cluster_places_need_distributed(tmp_path):
    result = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--process-id", 1)
    assert result.exit_code == 2
    assert "--coordinator, --num-processes, --process-id and --join-timeout need --distributed" in result.output
    assert not (tmp_path / "run").exists()
