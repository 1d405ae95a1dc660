"""Each process of a distributed command reads only the private records it needs (issue 43):
`pate train-teachers --distributed` the shards of the teachers on its own devices, a
fine-grained `pate label --distributed` its own block of records. The fast tests pick the rows
with a played cluster; the slow ones launch two real local JAX processes (gloo on CPU) on an
.npz copy of the tiny data set, record every row each process loaded (`pate.data.loading.on_rows_loaded`)
and compare the teachers and the release with one process's."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from conftest import ROOT, TINY, finish_processes, invoke, released, start_processes
from pate import data
from pate.data import loading
from pate.config import load_config
from pate.programs import cluster as cl
from pate.steps import teachers as teachers_step
from pate.store import rundir


def _npz_config(tmp_path, **overrides):
    """The tiny config on an .npz holding the tiny synthetic data set (a file read by rows)."""
    config = load_config(TINY, overrides)
    made = data.load_dataset(config.data)
    path = tmp_path / "tiny.npz"
    if not path.exists():
        np.savez(path, x_train=made.x_train, y_train=made.y_train, x_test=made.x_test, y_test=made.y_test)
    return dataclasses.replace(config, data=dataclasses.replace(config.data, name="npz", path=str(path))), made


class _Placement:
    """A placement whose process holds the padded teachers `local` of `padded`."""

    def __init__(self, padded, local):
        self.padded, self.local = padded, np.asarray(local)

    def local_teachers(self):
        return self.local


def test_a_process_reads_the_shards_of_its_own_teachers_only(tmp_path, monkeypatch):
    config, made = _npz_config(tmp_path)
    loaded = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: loaded.append(x.shape[0]))
    cluster = cl.Cluster(1, 2, gather=lambda x: np.asarray(x)[None])
    part, splits, shards = teachers_step._private_data(config, _Placement(6, [3, 4, 5]), cluster, echo=lambda _l: None)
    assert loaded == [3 * part.shard_size]  # teachers 3-5's records, nothing else
    assert np.array_equal(shards.teachers, [3, 4, 5])
    whole = data.split(made, config.data.public_size)
    for i, t in enumerate(shards.teachers):
        mine = splits.train_x[shards.positions[i]]
        assert mine.tobytes() == whole.train_x[part.indices[t]].tobytes()
        assert splits.train_y[shards.positions[i]].tobytes() == whole.train_y[part.indices[t]].tobytes()
    assert splits.eval_x.tobytes() == whole.eval_x.tobytes() and splits.num_classes == whole.num_classes
    # a padding teacher (8 on 4 devices of 2 processes: 6 real) trains on teacher 0's shard
    part, splits, shards = teachers_step._private_data(config, _Placement(8, [4, 5, 6, 7]), cluster,
                                                       echo=lambda _l: None)
    assert splits.train_x[shards.positions[2]].tobytes() == whole.train_x[part.indices[0]].tobytes()
    assert teachers_step._ranges(np.array([4, 5, 6, 7]), 6) == "4-5"
    assert teachers_step._ranges(np.array([0, 2, 3, 5]), 6) == "0, 2-3, 5"


def test_a_fine_grained_process_reads_its_own_block_only(tmp_path, monkeypatch):
    config, made = _npz_config(tmp_path, **{"aggregation.mechanism": "fine-grained", "fine_grained.pca": 16})
    loaded = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: loaded.append(x.shape[0]))
    process_1 = cl.Cluster(1, 3, gather=lambda x: np.asarray(x)[None])
    splits, start, total = process_1.own_records(config.data, config.data.public_size)
    assert (start, total, loaded) == (160, 480, [160])
    assert splits.train_x.tobytes() == made.x_train[160:320].tobytes()
    assert splits.pool_x.tobytes() == made.x_test[:config.data.public_size].tobytes()


def test_a_round2_process_reads_the_shards_of_its_own_heads_only(tmp_path, monkeypatch):
    from pate.steps import label_round2

    config, made = _npz_config(tmp_path)
    loaded = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: loaded.append(x.shape[0]))
    teachers = config.teachers.num_teachers
    cluster = cl.Cluster(1, 2, gather=lambda x: np.asarray(x)[None])
    splits, shards = label_round2._own_data(config, cluster)
    block = cluster.rows(teachers)
    part = data.partition(made.x_train.shape[0], teachers, config.teachers.seed)
    assert loaded == [len(block) * part.shard_size]  # its heads' shards, nothing else
    whole = data.split(made, config.data.public_size)
    for i, t in enumerate(block):
        assert splits.train_x[shards[i]].tobytes() == whole.train_x[part.indices[t]].tobytes()
        assert splits.train_y[shards[i]].tobytes() == whole.train_y[part.indices[t]].tobytes()
    assert splits.pool_x.tobytes() == whole.pool_x.tobytes()
    # one process reads the whole split; its shards are the partition's own record numbers
    splits, shards = label_round2._own_data(config, cl.Cluster(0, 1, gather=lambda x: np.asarray(x)[None]))
    assert splits.train_x.tobytes() == whole.train_x.tobytes() and np.array_equal(shards, part.indices)


# ------------------------------------------------------------------ slow: real processes

#: The CLI with `pate.data.loading.on_rows_loaded` recording, in $ROWS_TO.<process id>, the number of
#: private records of each call (what the process held); nothing else differs from `pate`.
HOOKED = """
import json, os, runpy, sys
sys.path.insert(0, {root!r})
import pate.data.loading as d
p = sys.argv[sys.argv.index("--process-id") + 1] if "--process-id" in sys.argv else "alone"
def hook(x, y):
    with open(os.environ["ROWS_TO"] + "." + p, "a") as out:
        out.write(json.dumps([int(x.shape[0]), int(x.nbytes + y.nbytes)]) + "\\n")
d.on_rows_loaded = hook
sys.argv = [{cli!r}, *sys.argv[1:]]
runpy.run_path({cli!r}, run_name="__main__")
"""


def _loaded(prefix, p):
    path = f"{prefix}.{p}"
    return [json.loads(line)[0] for line in open(path)] if os.path.exists(path) else []


def _write_toml(tmp_path, config_path, fine: bool) -> str:
    text = TINY.read_text().replace('name = "synthetic"', f'name = "npz"\npath = "{config_path}"', 1)
    if fine:
        text = text.replace('mechanism = "lnmax"', 'mechanism = "fine-grained"', 1)
        text += "\n[fine_grained]\npca = 16\nvotes_per_record = 3\n"
    path = tmp_path / ("fine.toml" if fine else "teachers.toml")
    path.write_text(text)
    return str(path)


@pytest.mark.slow  # one process and two JAX processes train the tiny teachers: 20-50 s on the shared 2-core machine
def test_two_processes_train_one_process_teachers_each_reading_its_own_shards(tmp_path):
    _npz_config(tmp_path)
    toml = _write_toml(tmp_path, tmp_path / "tiny.npz", fine=False)
    one, many, rows = tmp_path / "one", tmp_path / "many", tmp_path / "rows"
    alone = invoke("train-teachers", "--config", toml, "--workdir", one, "--no-progress")
    assert alone.exit_code == 0, alone.output
    script = HOOKED.format(root=str(ROOT), cli=str(ROOT / "cli.py"))
    command = ["-c", script, "train-teachers", "--config", toml, "--workdir", many, "--no-progress"]
    procs = start_processes([command] * 2, env={"ROWS_TO": str(rows)})
    first, second = finish_processes(procs, 300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    # 480 records, 6 teachers of 80: process p holds teachers 3p..3p+2, 240 records, and no other
    assert [_loaded(rows, p) for p in (0, 1)] == [[240], [240]]
    assert "process 0 of 2: teachers 0-2, 240 private records read of 480" in first.stdout, first.stdout
    assert "process 1 of 2: teachers 3-5, 240 private records read of 480" in second.stdout, second.stdout
    a, b = (json.loads((run / rundir.TEACHERS_JSON).read_text()) for run in (one, many))
    for key in ("accuracy", "loss_history", "ensemble_accuracy", "train_points", "shard_size", "data_set"):
        assert a[key] == b[key], key
    import jax

    from pate.programs.teacher_training import read_ensemble

    theirs, ours = (jax.tree.leaves(read_ensemble(run).load().params) for run in (one, many))
    assert len(theirs) == len(ours)
    # The same data on each device (byte for byte: tests/test_data_rows.py); XLA compiles the program
    # sharded over two processes apart from the one-device one, so the parameters may differ in
    # their last bits (measured: at most 7.5e-8), never in a score or a vote.
    for u, v in zip(theirs, ours):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=0, atol=1e-6)


@pytest.mark.slow  # one release in-process, one launch of 2 JAX processes: 5-15 s
def test_a_fine_grained_release_of_two_processes_reading_their_own_blocks_is_one_process_release(tmp_path):
    _npz_config(tmp_path)
    toml = _write_toml(tmp_path, tmp_path / "tiny.npz", fine=True)
    one, many, rows = tmp_path / "one", tmp_path / "many", tmp_path / "rows"
    alone = invoke("label", "--workdir", one, "--config", toml, "--seed", "11")
    assert alone.exit_code == 0, alone.output
    script = HOOKED.format(root=str(ROOT), cli=str(ROOT / "cli.py"))
    procs = start_processes([["-c", script, "label", "--workdir", many, "--config", toml, "--seed", "11"]] * 2,
                            env={"ROWS_TO": str(rows)})
    first, second = finish_processes(procs, 240)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert [_loaded(rows, p) for p in (0, 1)] == [[240], [240]]  # its block, process 0's too
    assert released(one / rundir.LABELS_NPZ) == released(many / rundir.LABELS_NPZ)
