"""`pate run`'s cluster options (`pate.cli.options.cluster`, as train-teachers and label take
them): refused in one line with exit 2 where they cannot apply, before any process joins a
cluster or touches the run directory. The runs themselves: tests/steps/test_run_distributed.py."""

from __future__ import annotations

from conftest import CONFIGS, TINY, invoke


def test_cluster_places_need_distributed(tmp_path):
    result = invoke("run", "--config", TINY, "--workdir", tmp_path / "run", "--process-id", 1)
    assert result.exit_code == 2
    assert "--coordinator, --num-processes and --process-id need --distributed" in result.output
    assert not (tmp_path / "run").exists()


def test_a_fine_grained_run_is_refused_distributed_before_joining_a_cluster(tmp_path):
    result = invoke("run", "--config", CONFIGS / "fashion_mnist_fine.toml", "--workdir", tmp_path / "run",
                    "--distributed", "--coordinator", "127.0.0.1:1", "--num-processes", 2, "--process-id", 0)
    assert result.exit_code == 2
    assert "a fine-grained run reads the private records in one process: drop --distributed" in result.output
    assert not (tmp_path / "run").exists()
