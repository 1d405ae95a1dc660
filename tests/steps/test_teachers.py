"""The teacher ensemble: training, artifacts, votes, resume, sharding, NaN, and the CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from click.testing import CliRunner

from analysis.core.errors import PateError
from cli import main
from pate.store import rundir
from pate.programs import voting
from pate.config import config_hash, load_config
from pate.programs.placement import teacher_chunk
from pate.programs import teacher_training
from pate.steps import teachers

from conftest import ROOT, TINY


def replace(config, **teacher_fields):
    return dataclasses.replace(config, teachers=dataclasses.replace(config.teachers,
                                                                    **teacher_fields))


def checkpoint_steps(workdir):
    return sorted(int(p.name) for p in (workdir / rundir.TEACHERS_DIR).iterdir()
                  if p.name.isdigit())


def assert_trees_close(a, b, atol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


# --------------------------------------------------------------------------- training


def test_tiny_run_writes_artifacts(trained_run, tiny_config):
    workdir, result = trained_run
    info = json.loads((workdir / rundir.TEACHERS_JSON).read_text())
    from pate.programs.data_facts import with_data_defaults

    # the config the step ran: the keys the file left out decided by the data (issue 53)
    assert info["meta"]["config_hash"] == config_hash(with_data_defaults(tiny_config))
    assert info["num_teachers"] == 6 and info["shard_size"] == 80 and info["left_out"] == 0
    assert info["num_classes"] == 4 and info["image_shape"] == [8, 8, 1]
    assert len(info["accuracy"]) == 6 and len(info["loss_history"]) == 4
    assert info["loss_history"][-1] < info["loss_history"][0]
    assert info["ensemble_accuracy"] == pytest.approx(result.ensemble_accuracy)
    assert result.ensemble_accuracy > 0.6  # four classes: chance is 0.25
    assert load_config(workdir / rundir.CONFIG_TOML) == with_data_defaults(tiny_config)
    assert checkpoint_steps(workdir) == [2, 4]  # checkpoint_every = 2, and the end
    summary = result.summary()
    assert "ensemble plurality accuracy" in summary and "min" in summary and "device" in summary


def test_loaded_teachers_reproduce_reported_accuracy(trained_run, tiny_config):
    workdir, result = trained_run
    ens = teacher_training.load_teachers(workdir)
    assert ens.num_teachers == 6 and ens.num_classes == 4
    from pate.data import load_dataset, split

    s = split(load_dataset(tiny_config.data), tiny_config.data.public_size)
    preds = voting.teacher_predictions(ens.params, ens.model, s.eval_x, batch_size=32)
    np.testing.assert_allclose((preds == s.eval_y).mean(axis=1), result.accuracies)


def test_predict_votes(trained_run):
    workdir, _ = trained_run
    ens = teacher_training.load_teachers(workdir)
    images = np.random.default_rng(0).uniform(size=(23, 8, 8, 1)).astype(np.float32)
    votes = voting.predict_votes(ens.params, ens.model, images, ens.num_classes, batch_size=7)
    assert votes.shape == (23, 4) and votes.dtype == np.int32
    np.testing.assert_array_equal(votes.sum(axis=1), 6)
    # a plain loop over teachers, one image batch at a time
    expected = np.zeros((23, 4), np.int32)
    for t in range(6):
        params_t = jax.tree.map(lambda p: p[t], ens.params)
        pred = np.asarray(ens.model.apply(params_t, images).argmax(-1))
        expected[np.arange(23), pred] += 1
    np.testing.assert_array_equal(votes, expected)
    preds = voting.teacher_predictions(ens.params, ens.model, images, batch_size=100)
    np.testing.assert_array_equal(voting.votes_from_predictions(preds, 4), expected)
    empty = voting.predict_votes(ens.params, ens.model, images[:0], 4)
    assert empty.shape == (0, 4)


def test_plurality_accuracy_ties_go_to_lowest_class():
    votes = np.array([[2, 2, 0], [0, 1, 3]])
    assert voting.plurality_accuracy(votes, np.array([0, 2])) == 1.0
    assert voting.plurality_accuracy(votes, np.array([1, 2])) == 0.5


class _Killed(Exception):
    pass


@pytest.mark.slow  # 17 s; test_pipeline's test_interrupted_teachers_resume stays fast
def test_resume_after_kill_matches_uninterrupted(trained_run, tiny_config, tmp_path):
    straight, _ = trained_run
    workdir = tmp_path / "killed"

    def kill_at_3(epoch, loss):
        if epoch == 3:  # after epoch 3; the last checkpoint is epoch 2
            raise _Killed

    with pytest.raises(_Killed):
        teachers.train_teachers(tiny_config, workdir, show_progress=False, on_epoch=kill_at_3)
    assert checkpoint_steps(workdir) == [2] and not (workdir / rundir.TEACHERS_JSON).exists()
    result = teachers.train_teachers(tiny_config, workdir, resume=True, show_progress=False)
    assert result.resumed_from == 2
    a, b = teacher_training.load_teachers(straight), teacher_training.load_teachers(workdir)
    assert_trees_close(a.params, b.params, atol=1e-6)
    info_a = json.loads((straight / rundir.TEACHERS_JSON).read_text())
    info_b = json.loads((workdir / rundir.TEACHERS_JSON).read_text())
    np.testing.assert_allclose(info_a["loss_history"], info_b["loss_history"], rtol=1e-6)
    assert info_a["accuracy"] == info_b["accuracy"]


@pytest.mark.slow  # 9 s; test_cli_nan_exits_with_one_line keeps the NaN stop fast
def test_nan_stops_names_teachers_and_keeps_last_good(tiny_config, tmp_path, monkeypatch):
    real = teacher_training.make_epoch_fn

    def poisoned(*args, **kwargs):
        epoch_fn = real(*args, **kwargs)

        def run(params, opt_state, x, y, ids, epoch):
            params, opt_state, loss, finite = epoch_fn(params, opt_state, x, y, ids, epoch)
            if int(epoch) == 2:  # the third epoch: teachers 1 and 4 blow up
                bad = np.isin(np.arange(loss.shape[0]), [1, 4])
                loss = jax.numpy.where(bad, jax.numpy.nan, loss)
                finite = finite & ~bad
            return params, opt_state, loss, finite

        return run

    monkeypatch.setattr(teachers, "make_epoch_fn", poisoned)
    workdir = tmp_path / "nan"
    with pytest.raises(PateError) as err:
        teachers.train_teachers(tiny_config, workdir, show_progress=False)
    message = str(err.value)
    assert "epoch 3" in message and "2 teacher(s) (ids 1, 4)" in message
    assert "last good checkpoint (epoch 2)" in message
    assert checkpoint_steps(workdir) == [2] and not (workdir / rundir.TEACHERS_JSON).exists()


@pytest.mark.slow  # 7 s; test_nan_stops_names_teachers_and_keeps_last_good stays fast
def test_real_nan_from_a_huge_learning_rate(tiny_config, tmp_path):
    config = replace(tiny_config, optimizer="sgd", learning_rate=1e30)
    with pytest.raises(PateError, match=r"NaN/inf in epoch 1 for 6 teacher\(s\)"):
        teachers.train_teachers(config, tmp_path / "r", show_progress=False)


@pytest.mark.slow  # about 1 min of CPU: fake devices; run with -m slow (and on a GPU)
def test_teacher_padding_and_sharding_equal_single_device(tmp_path):
    """6 teachers over 4 (forced host) devices: padded to 8, sharded (shard_map), with and
    without chunks, give the parameters and votes of one device."""
    script = textwrap.dedent(f"""
        import dataclasses, json, sys
        import jax, numpy as np
        from pate.config import load_config
        from pate.programs import voting
        from pate.programs import teacher_training
        from pate.steps import teachers
        from pate.programs.placement import Placement
        assert len(jax.devices()) == 4, jax.devices()
        config = load_config({str(TINY)!r})
        chunked = dataclasses.replace(config, teachers=dataclasses.replace(
            config.teachers, teacher_chunk=1))
        out = {{}}
        for name, cfg, devices in (("one", config, jax.devices()[:1]),
                                   ("four", config, jax.devices()),
                                   ("chunked", chunked, jax.devices())):
            r = teachers.train_teachers(cfg, {str(tmp_path)!r} + "/" + name,
                                        show_progress=False, devices=devices)
            out[name] = r.accuracies.tolist()
        a = teacher_training.load_teachers({str(tmp_path)!r} + "/one")
        b = teacher_training.load_teachers({str(tmp_path)!r} + "/four")
        c = teacher_training.load_teachers({str(tmp_path)!r} + "/chunked")
        diff = max(float(np.max(np.abs(x - y))) for other in (b, c) for x, y in
                   zip(jax.tree.leaves(a.params), jax.tree.leaves(other.params)))
        images = np.random.default_rng(0).uniform(size=(40, 8, 8, 1)).astype(np.float32)
        placement = Placement(6, jax.devices())
        sharded = placement.put(b.params)
        assert len(jax.tree.leaves(sharded)[0].sharding.device_set) == 4
        v4 = voting.predict_votes(sharded, b.model, images, 4, 16, placement=placement)
        v4c = voting.predict_votes(sharded, b.model, images, 4, 16, placement=placement,
                                   chunk=1)
        p4 = voting.teacher_predictions(sharded, b.model, images, 16, placement, chunk=1)
        p1 = Placement(6, jax.devices()[:1])
        v1 = voting.predict_votes(p1.put(b.params), b.model, images, 4, 16, placement=p1)
        same = bool((v1 == v4).all() and (v1 == v4c).all()
                    and (voting.votes_from_predictions(p4, 4) == v1).all())
        print(json.dumps({{"diff": diff, "acc": out, "votes_equal": same,
                          "votes_sum": int(v4.sum())}}))
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["diff"] < 1e-4
    for name in ("four", "chunked"):
        np.testing.assert_allclose(result["acc"]["one"], result["acc"][name], atol=0.02)
    assert result["votes_equal"] and result["votes_sum"] == 6 * 40


# --------------------------------------------------------------------------- the command


def invoke(*args):
    return CliRunner().invoke(main, ["train-teachers", "--no-progress", *map(str, args)])


@pytest.mark.slow  # 22 s (two trainings); test_reliability keeps overwrite fast
def test_cli_trains_and_refuses_to_overwrite(tmp_path):
    workdir = tmp_path / "run"
    ok = invoke("--config", TINY, "--workdir", workdir, "--epochs", 2)
    assert ok.exit_code == 0, ok.output
    assert "ensemble plurality accuracy" in ok.output and "wall time" in ok.output
    assert load_config(workdir / rundir.CONFIG_TOML).teachers.epochs == 2
    again = invoke("--config", TINY, "--workdir", workdir, "--epochs", 2)
    assert again.exit_code == 1
    assert "already holds teachers, teachers.json; pass --overwrite" in again.output
    other = invoke("--config", TINY, "--workdir", workdir, "--epochs", 3, "--resume")
    assert other.exit_code == 1 and "differs from this config in teachers.epochs" in other.output
    resumed = invoke("--config", TINY, "--workdir", workdir, "--epochs", 2, "--resume")
    assert resumed.exit_code == 0 and "resumed from epoch 2" in resumed.output
    replaced = invoke("--config", TINY, "--workdir", workdir, "--teachers", 4, "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((workdir / rundir.TEACHERS_JSON).read_text())["num_teachers"] == 4


@pytest.mark.parametrize("extra, message", [
    (["--teachers", 1000], "1000 teachers but only 480 training points"),
    (["--teachers", 60], "gets 8 training points, fewer than teachers.batch_size = 16"),
    (["--set", "teachers.epochz=3"], "unknown key teachers.epochz"),
    (["--set", "teachers.batch_size=large"], "teachers.batch_size must be an integer"),
    (["--set", "data.public_size=300"], "leaves no evaluation points"),
    (["--resume"], "nothing to resume"),
])
def test_cli_bad_input(tmp_path, extra, message):
    result = invoke("--config", TINY, "--workdir", tmp_path / "run", *extra)
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert result.output.count("\n") == 1 and result.output.startswith("pate: ")
    assert not (tmp_path / "run" / rundir.TEACHERS_JSON).exists()


def test_cli_bad_config_file_names_key_and_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.read_text().replace("epochs = 4", "epochs = \"four\""))
    result = invoke("--config", path, "--workdir", tmp_path / "run")
    assert result.exit_code == 1
    assert str(path) in result.output and "teachers.epochs must be an integer" in result.output


def test_cli_resume_and_overwrite_exclusive(tmp_path):
    result = invoke("--config", TINY, "--workdir", tmp_path, "--resume", "--overwrite")
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_cli_nan_exits_with_one_line(tmp_path):
    result = invoke("--config", TINY, "--workdir", tmp_path / "r", "--set", "teachers.optimizer=sgd",
                    "--set", "teachers.learning_rate=1e30")
    assert result.exit_code == 1 and "NaN/inf" in result.output and "ids 0, 1, 2" in result.output


@pytest.mark.slow
def test_quickstart_on_fashion_mnist(tmp_path):
    """The quickstart config on real Fashion-MNIST learns (minutes on 2 CPU cores)."""
    from pate.data import load_dataset

    config = load_config(ROOT / "configs" / "quickstart.toml")
    try:
        load_dataset(config.data)
    except PateError as err:
        pytest.skip(f"Fashion-MNIST not installed: {err}")
    result = teachers.train_teachers(config, tmp_path / "q", show_progress=False)
    assert result.accuracies.mean() > 0.7 and result.ensemble_accuracy > 0.75


@pytest.mark.slow  # retrains the ensemble twice; run with -m slow
def test_teacher_chunks_change_speed_not_results(tiny_config, tmp_path, trained_run):
    straight, _ = trained_run  # all 6 teachers in one vmap
    chunked = replace(tiny_config, teacher_chunk=4)  # a chunk of 4, then a remainder of 2
    assert teacher_chunk(chunked.teachers, "cpu") == 4
    assert teacher_chunk(tiny_config.teachers, "gpu") == 0
    teachers.train_teachers(chunked, tmp_path / "c", show_progress=False)
    a, b = teacher_training.load_teachers(straight), teacher_training.load_teachers(tmp_path / "c")
    assert_trees_close(a.params, b.params, atol=1e-5)


@pytest.mark.slow  # a subprocess that trains; run with -m slow
def test_distributed_flag(tmp_path):
    """`--distributed` initialises jax.distributed (here: a one-process 'cluster')."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pate = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())",
            "train-teachers", "--config", str(TINY), "--no-progress", "--distributed"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    ok = subprocess.run(pate + ["--workdir", str(tmp_path / "ok"), "--coordinator",
                                f"127.0.0.1:{port}", "--num-processes", "1", "--process-id", "0"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "ok" / rundir.TEACHERS_JSON).exists()
    bad = subprocess.run(pate + ["--workdir", str(tmp_path / "bad")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "jax.distributed.initialize() failed" in bad.stderr
    assert bad.stderr.count("\n") == 1


def test_cluster_options_need_distributed(tmp_path):
    result = invoke("--config", TINY, "--workdir", tmp_path, "--num-processes", 2)
    assert result.exit_code == 2 and "need --distributed" in result.output


def test_resume_with_nothing_to_do_writes_nothing(trained_run, tiny_config):
    """`--resume` on finished teachers (issue 21): nothing written, teachers.json and
    config.toml untouched (so `pate run` does not label again)."""
    from conftest import snapshot

    workdir, _ = trained_run
    before = snapshot(workdir)
    mtimes = {p: p.stat().st_mtime_ns for p in workdir.iterdir()}
    lines = []
    result = teachers.train_teachers(tiny_config, workdir, resume=True, show_progress=False, echo=lines.append)
    assert snapshot(workdir) == before
    assert {p: p.stat().st_mtime_ns for p in workdir.iterdir()} == mtimes
    assert result.epochs == tiny_config.teachers.epochs and "nothing to resume" in " ".join(lines)


def test_init_fn_compiles_once_for_teachers_initialised_one_by_one(tiny_config):
    """The sequential baseline of bench/teachers.py initialises one teacher at a time: with
    one `make_init_fn` it compiles once (a new jit per teacher recompiled 500 times and ran
    past 200 s on an H200), and each teacher gets the parameters `init_teachers` gives it."""
    from pate.programs.models import make_model
    from pate.programs.placement import Placement

    tc = tiny_config.teachers
    model = make_model(tc, 4, backend="cpu")
    tx = teacher_training.make_optimizer(tc, 4)
    one = Placement(1, jax.devices()[:1])
    init = teacher_training.make_init_fn(model, tx, (8, 8, 1), tc.seed, one)
    every = Placement(3, jax.devices()[:1])
    together, _ = teacher_training.init_teachers(model, tx, (8, 8, 1), tc.seed, every)
    for t in range(3):
        params, _ = init(one.put(np.array([t], np.int32)))
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(together)):
            np.testing.assert_allclose(np.asarray(a)[0], np.asarray(b)[t], rtol=1e-6, atol=1e-7)
    assert init._cache_size() == 1
