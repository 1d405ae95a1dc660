"""`pate dpsgd --distributed`: the processes' Poisson samples are one process's sample, record for
record; one step split over processes is one process's step up to the regrouping of float32 sums
(the bound of recursive summation), its noise drawn once, by process 0, as one process draws it;
on real local processes (slow) the model is one process's up to rounding, process 0 alone writes
and charges, and a process that fails or is killed stops every process with nothing charged."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import (ROOT, TINY, Others, finish_processes, invoke, kill_one_after, run_entries, start_processes,
                      stopped_by, tiny_dpsgd_cnn)
from pate.baselines import cluster_step, dpsgd
from pate.config import load_config
from pate.programs import keys, models
from pate.programs.cluster import Cluster, block, status
from pate.store import rundir

SEED = 7


# --------------------------------------------------------------------------- the sample


@pytest.mark.parametrize("processes", [2, 3, 4])
def test_the_slices_sample_what_one_process_samples(processes):
    """With one seed every process draws ``rng.random(N)`` and keeps its own records' draws: the
    slices' samples together are one process's sample, step after step."""
    n, rate, micro = 1001, 0.05, 16
    alone = np.random.default_rng(3)
    parts = [np.random.default_rng(3) for _ in range(processes)]
    for _ in range(20):
        idx, valid = dpsgd.poisson_batch(alone, n, rate, micro)
        want = idx.ravel()[valid.ravel() > 0]
        got = []
        for p, rng in enumerate(parts):
            rows = block(n, processes, p)
            idx_p, valid_p = dpsgd.poisson_batch(rng, n, rate, micro, rows)
            got.extend(rows.start + idx_p.ravel()[valid_p.ravel() > 0])
        np.testing.assert_array_equal(got, want)


def test_a_process_without_records_is_refused_in_one_line():
    """3 records on 4 processes: slices of 1, the last one empty (it could only add padding)."""
    from analysis.core.errors import PateError

    config = load_config(TINY, {"data.synthetic_train_size": 3})
    alone = lambda x: np.asarray(x)[None]
    splits, rows, n = dpsgd.own_splits(config, Cluster(2, 4, gather=alone))
    assert (rows, n, splits.train_x.shape[0]) == (range(2, 3), 3, 1)
    with pytest.raises(PateError, match="process 3 of 4 holds none of the 3 private records .slices of 1.: run "
                                        "DP-SGD on fewer processes"):
        dpsgd.own_splits(config, Cluster(3, 4, gather=alone))


# --------------------------------------------------------------------------- one step, split


def _linear_and_data():
    """A linear model on the tiny 8 x 8 images (the sums and the noise are the model's shapes'
    alone: the cheapest to compile; the CNN's clipped sum is tested in test_dpsgd.py) and 40
    random examples."""
    _, _, x, y = tiny_dpsgd_cnn(40, seed=1)
    model = models.Linear(4)
    return model, model.init(jax.random.key(0), jnp.zeros((1, *x.shape[1:]))), x, y


def _split_steps(model, params, tx, clip, noise_std, denominator, x, y, idx_valid, key):
    """Both processes' steps of a played cluster of two (`Cluster` on `conftest.Others`) on records
    [0, m) and [m, n): process 1's first (its part recorded), then process 0's, given process 1's
    part. Returns process 0's new
    parameters and both parts as sent."""
    (idx0, valid0), (idx1, valid1), m = idx_valid
    copy = lambda: jax.tree.map(jnp.array, params)  # the steps donate the parameters they are given
    noise = lambda g, k: dpsgd.noisy_mean(g, k, noise_std, 1.0)
    batch_sum = dpsgd.batch_gradient_sum(model, clip)
    size = jax.flatten_util.ravel_pytree(params)[0].size
    # Each step's collectives: an agreement (the other's word: no failure), then the parts' gather.
    second = Others(status(), np.zeros(size, np.float32), index=1)  # process 0's part: not needed here
    step1 = cluster_step.make_split_step(batch_sum, noise, tx, denominator, Cluster(1, 2, gather=second), params)
    step1(copy(), tx.init(params), jnp.asarray(x[m:]), jnp.asarray(y[m:]), jnp.asarray(idx1), jnp.asarray(valid1), key)
    first = Others(status(), second.sent[1], index=0)
    step0 = cluster_step.make_split_step(batch_sum, noise, tx, denominator, Cluster(0, 2, gather=first), params)
    new, _ = step0(copy(), tx.init(params), jnp.asarray(x[:m]), jnp.asarray(y[:m]), jnp.asarray(idx0),
                   jnp.asarray(valid0), key)
    return new, first.sent[1], second.sent[1]


def _batches(n, m, rate, micro, seed):
    alone = dpsgd.poisson_batch(np.random.default_rng(seed), n, rate, micro)
    parts = [dpsgd.poisson_batch(np.random.default_rng(seed), n, rate, micro, rows)
             for rows in (range(0, m), range(m, n))]
    return alone, (*parts, m)


def test_a_split_step_is_one_process_step_up_to_the_regrouping_of_its_sums():
    """Process 0's update from the two parts equals one process's `make_step` update of the same
    sample, coordinate c within the bound of recursive float32 summation: each of the two sums
    (one process's, the processes') of the b clipped gradients is within gamma_b sum_i |g_i[c]|
    of the exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 2002, eq. 4.4),
    so they are within 2 gamma_b of each other, then scaled by lr / denominator (plus the
    update's own rounding). No noise here: the sums alone."""
    model, params, x, y = _linear_and_data()
    n, m, clip, lr, denominator = 40, 17, 0.5, 1.0, 12.0
    tx = optax.sgd(lr)
    (idx, valid), split = _batches(n, m, 0.6, 8, seed=5)
    key = keys.noise_key(1)
    alone, _ = dpsgd.make_step(model, tx, clip, 0.0, denominator)(
        jax.tree.map(jnp.array, params), tx.init(params), jnp.asarray(x), jnp.asarray(y), jnp.asarray(idx), jnp.asarray(valid), key)
    new, _, _ = _split_steps(model, params, tx, clip, 0.0, denominator, x, y, split, key)

    def loss_one(p, xi, yi):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, xi[None]), yi[None])[0]

    chosen = idx.ravel()[valid.ravel() > 0]
    # sum_i |clip(g_i)[c]|: each sampled example's clipped gradient, in one vmapped program
    grads = jax.jit(jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0)))(params, x[chosen], y[chosen])
    norms = np.sqrt(sum(np.sum(np.square(np.asarray(g)).reshape(len(chosen), -1), axis=1)
                        for g in jax.tree.leaves(grads)))
    factor = np.minimum(1.0, clip / norms)
    magnitude = jax.tree.map(lambda g: np.tensordot(factor, np.abs(np.asarray(g)), axes=1), grads)
    b = chosen.size
    u = 2.0 ** -24
    gamma = b * u / (1 - b * u)
    for got, want, mag, p in zip(*(jax.tree.leaves(t) for t in (new, alone, magnitude, params))):
        bound = lr / denominator * 2 * gamma * mag + 4 * u * np.abs(np.asarray(p)) + 1e-30
        assert np.all(np.abs(np.asarray(got) - np.asarray(want)) <= bound)
    assert b > 10 and not all(np.array_equal(a, w) for a, w in zip(jax.tree.leaves(new), jax.tree.leaves(params)))


def test_the_noise_is_drawn_once_by_process_0_as_one_process_draws_it():
    """With an empty sample the parts are the noise alone: process 0's is the noise one process
    draws with the same key (`noisy_mean` of zeros: the same normal draws, times sigma C, which
    XLA may fuse with the addition into one rounding or not: within 2 ulps), process 1's is zero."""
    model, params, x, y = _linear_and_data()
    m = 20
    empty = [(np.zeros((1, 8), np.int32), np.zeros((1, 8), np.float32))] * 2
    key = keys.noise_key(9)
    _, first, second = _split_steps(model, params, optax.sgd(1.0), 0.5, 1.3, 12.0, x, y, (*empty, m), key)
    zeros = jax.tree.map(jnp.zeros_like, params)
    want = jax.flatten_util.ravel_pytree(dpsgd.noisy_mean(zeros, key, 1.3, 1.0))[0]
    np.testing.assert_allclose(first, np.asarray(want), rtol=2 * 2.0 ** -23, atol=0)
    assert not np.any(second) and np.std(first) == pytest.approx(1.3, rel=0.2)


# --------------------------------------------------------------------------- real local processes


def start(workdirs, *extra, devices: int = 1, configs=None):
    """``pate dpsgd --distributed`` as len(workdirs) local processes on the tiny config."""
    configs = configs or [TINY] * len(workdirs)
    return start_processes([[ROOT / "cli.py", "dpsgd", "--config", c, "--workdir", w, "--seed", SEED, "--no-progress",
                             *extra] for w, c in zip(workdirs, configs)], devices=devices)


def _params(run):
    """The parameters of a run's DP-SGD model (dpsgd/), by its dpsgd.json's model and input shape."""
    from pate.store import checkpoints

    made = json.loads((run / rundir.DPSGD_JSON).read_text())
    model = dpsgd.make_model(load_config(TINY).dpsgd, made["model"], 4, tuple(made["input_shape"]))
    like = model.init(jax.random.key(0), jnp.zeros((1, *made["input_shape"])))
    return jax.tree.leaves(checkpoints.restore_params(run / rundir.DPSGD_DIR, like))


#: A linear model on a concatenated public map: the map's part scales and DP-SGD's pool scale, made
#: by process 0 and shared, and each process's rows of its own records.
ON_A_MAP = ("--model", "linear", "--features", "scattering+pixels", "--set", "fine_grained.scattering_j=1",
            "--set", "fine_grained.scattering_l=4", "--set", "fine_grained.groups=1", "--set", "dpsgd.linear_batch_size=96",
            "--set", "dpsgd.linear_learning_rate=2.0", "--set", "dpsgd.linear_epochs=5.0")


@pytest.mark.slow  # one dpsgd in-process, one launch of two JAX processes: 30-60 s on the shared 2-core machine
@pytest.mark.parametrize("devices, extra", [(1, ()), (2, ()), (1, ON_A_MAP)], ids=["cnn", "cnn-2-devices", "map"])
def test_two_processes_train_one_process_model(tmp_path, devices, extra):
    one, many = tmp_path / "one", tmp_path / "many"
    alone = invoke("dpsgd", "--config", TINY, "--workdir", one, "--seed", SEED, "--no-progress", *extra)
    assert alone.exit_code == 0, alone.output
    first, second = finish_processes(start([many, many], *extra, devices=devices), timeout=300)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "480 private training points (2 processes, each its own slice)" in first.stdout
    assert "process 1 of 2: the clipped gradients of records 240-479 in 25 steps" in second.stdout
    assert not (set(second.stdout.split()) & {"PUBLISH:", "wrote"})
    # The same sample and noise; the sums regrouped by process: equal up to float32 rounding
    # (measured 2e-6 after the 25 steps; the one-step bound is the test above).
    for a, b in zip(_params(one), _params(many)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=1e-4)
    mine, theirs = (json.loads((r / rundir.DPSGD_JSON).read_text()) for r in (one, many))
    for k in ("steps", "noise_multiplier", "sampling_rate", "train_points", "release_eps", "num_params",
              "features_scale", "features"):
        assert mine[k] == theirs[k], k
    assert [e["kind"] for e in run_entries(many)] == ["dpsgd", "dpsgd"]  # one ledger: one's release and the cluster's


@pytest.mark.slow  # one launch of two JAX processes: 20-40 s
def test_a_process_that_fails_stops_every_process_and_charges_nothing(tmp_path):
    run = tmp_path / "run"
    learned = tmp_path / "learned.toml"  # process 1 alone is told to use a map it has no weights for
    learned.write_text(TINY.read_text().replace('[dpsgd]\n', '[dpsgd]\nfeatures = "learned"\n')
                       .replace('model = "cnn"\neps = 3.0', 'model = "linear"\neps = 3.0'))
    # The agreement on every setting names process 1's map before it reads anything (it came after
    # process 1's own refusal of the missing weights once, which this test used to read).
    why = stopped_by(finish_processes(start([run, run], configs=[TINY, learned]), timeout=240), 1)
    assert why.startswith("process 1's dpsgd.features ('learned') differs from process 0's"), why
    assert not (run / rundir.DPSGD_JSON).exists() and run_entries(run) == []


@pytest.mark.slow  # one launch of two JAX processes killed mid-training, one rerun: 40-80 s
def test_a_process_killed_mid_training_leaves_nothing_charged_and_the_rerun_releases_once(tmp_path):
    run = tmp_path / "run"
    longer = ("--set", "dpsgd.cnn_epochs=60")  # 300 steps: the kill comes mid-training
    first, waited = kill_one_after(start([run, run], *longer), "dpsgd: cnn", timeout=120)
    assert first.returncode == 1 and waited < 60, first.stderr
    assert "lost the other processes of the cluster" in first.stderr.strip().splitlines()[-1]
    assert not (run / rundir.DPSGD_JSON).exists() and run_entries(run) == []
    again = invoke("dpsgd", "--config", TINY, "--workdir", run, "--seed", SEED, "--no-progress", *longer)
    assert again.exit_code == 0, again.output
    assert [e["kind"] for e in run_entries(run)] == ["dpsgd"]


#: `pate dpsgd` whose process 0 sleeps `SLOW` seconds before its first agreement of the command (a
#: process 0 that reads, checks and charges for long before the others hear from it).
SLOW_START = """
import os, runpy, sys, time
sys.path.insert(0, {root!r})
import jax
from pate.baselines import dpsgd
plain = dpsgd.Plan.of
def of(*a, **k):  # before process 0's first agreement of the command
    if jax.process_index() == 0:
        time.sleep(float(os.environ["SLOW"]))
    return plain(*a, **k)
dpsgd.Plan.of = of
sys.argv = [{cli!r}, *sys.argv[1:]]
runpy.run_path({cli!r}, run_name="__main__")
"""


@pytest.mark.slow  # two JAX processes, one asleep 40 s: 60-80 s of wall time, little CPU
def test_process_0_may_reach_its_first_agreement_long_after_the_others(tmp_path):
    """Gloo gives its first collective 30 s to find every process (later ones wait for minutes):
    every process makes that one as it joins (`placement.initialize_distributed`), so a process 0
    40 s late at the command's first agreement loses nobody (before: process 1 left with "Gloo context
    initialization failed: DEADLINE_EXCEEDED" after 30 s)."""
    run = tmp_path / "run"
    script = SLOW_START.format(root=str(ROOT), cli=str(ROOT / "cli.py"))
    first, second = finish_processes(start_processes(
        [["-c", script, "dpsgd", "--config", TINY, "--workdir", run, "--seed", SEED, "--no-progress"]] * 2,
        env={"SLOW": "40"}), timeout=240)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert [e["kind"] for e in run_entries(run)] == ["dpsgd"]
