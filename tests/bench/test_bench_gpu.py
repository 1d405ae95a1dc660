"""bench/gpu.py --smoke: the GPU benchmark's every part on the tiny synthetic job on CPU —
the vmapped ensemble against the same teachers in sequence, and `pate run` end to end
with a Wide-ResNet FixMatch student — and its one JSON object."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT, bench_module


def _bench():
    return bench_module("gpu")


@pytest.mark.slow  # 28 s: the GPU lease's smoke, run before a lease
def test_smoke_runs_every_part(_trained_tiny, tmp_path, capsys):
    shutil.copytree(_trained_tiny[0], tmp_path / "run")  # the teachers step is then up to date
    out = _bench().main(["--smoke", "--workdir", str(tmp_path), "--out", str(tmp_path / "gpu.json")])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "gpu.json").read_text()) == json.loads(json.dumps(out))
    assert out["environment"]["backend"] == "cpu" and out["environment"]["device_kind"] == "cpu"
    teachers = out["teachers"]
    assert teachers["teachers"] == 2 and teachers["speedup_over_sequential"] > 0
    assert teachers["ensemble"]["auto"]["max_param_diff_vs_sequential"] < 1e-3  # the same teachers
    run = out["run"]
    assert run["student_model"] == "wrn" and set(run["steps"]) == {"teachers", "label", "student", "analyze"}
    assert 0 <= run["student_accuracy"] <= 1 and run["headline_eps"] > 0
    assert run["student_steps"] == 2 and run["student_ms_per_step"] > 0 and run["teachers_train_s"] >= 0
    assert (tmp_path / "run" / "release.json").exists()


def test_data_folder_prefers_the_carried_copy(tmp_path, monkeypatch):
    bench = _bench()
    assert bench.data_folder(str(tmp_path)) == str(tmp_path.resolve())
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert bench.data_folder(None) == ""  # nothing carried: the loader's default
    carried = tmp_path / "data" / "fashion-mnist"
    carried.mkdir(parents=True)
    (carried / "train-images-idx3-ubyte.gz").write_bytes(b"")
    assert bench.data_folder(None) == str(carried)


@pytest.mark.slow
def test_lease_script_smoke_writes_both_parts(tmp_path):
    """bench/gpu_lease.sh --smoke: the lease's flow on CPU (about a minute), both parts' JSON in
    $OUT and the run's own files copied beside them."""
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_lease.sh"), "--smoke"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "out"
    assert json.loads((out / "teachers.json").read_text())["teachers"]["teachers"] == 2
    run = json.loads((out / "run.json").read_text())["run"]
    assert run["student_model"] == "wrn" and run["headline_eps"] > 0
    assert {p.name for p in out.iterdir()} >= {"run-release.json", "run-student.json", "run.log"}
