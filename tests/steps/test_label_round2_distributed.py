"""`pate label --round 2 --distributed` on real local processes (JAX's multi-controller runtime,
gloo collectives on CPU): each process fits the ridge heads of its own block of teachers on their
own shards and votes with them; two processes (one device or two each) release what one does, a
process that fails stops both with one line and nothing charged, and a killed one stops the other
at once. Each launch starts two JAX processes (15-30 s on the shared 2-core machine), so those
tests are slow (`pytest -m slow`); the heads' layout independence is in the fast suite here
(`test_a_block_of_heads_is_the_same_heads_as_all_of_them`)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import (ROOT, finish_processes, invoke, kill_one_after, own_copy, released, run_entries, start_processes,
                      stopped_by)
from pate.store import rundir

SEED, QUERIES = 5, 40


def start(workdirs, *extra, devices: int = 1):
    """``pate label --round 2 --distributed`` as len(workdirs) local processes, process p on
    ``workdirs[p]`` (the same run directory for a real cluster)."""
    return start_processes([[ROOT / "cli.py", "label", "--round", 2, "--workdir", w, "--queries", QUERIES,
                             "--seed", SEED, *extra] for w in workdirs], devices=devices)


def launch(workdirs, *extra, devices: int = 1, timeout: float = 240):
    """`start`, and wait for every process: their results by process id."""
    return finish_processes(start(workdirs, *extra, devices=devices), timeout)


def names(run) -> list[str]:
    """The run directory's entries, a moved-aside step's folder without the time in its name."""
    return sorted(name.rsplit("-", 2)[0] if name.startswith("stale-") else name for name in os.listdir(run))


def labels_kinds(run) -> list[str]:
    """The kinds of the ledger's entries of the run's data set, round 2's marked."""
    return [e["kind"] + ("-2" if (e.get("mechanism") or {}).get("round") == 2 else "") for e in run_entries(run)]


@pytest.mark.slow  # one round 2 in-process, one launch of 2 JAX processes: 20-40 s on the shared 2-core machine
@pytest.mark.parametrize("devices", [1, 2])  # CPU devices per process
def test_two_processes_release_what_one_process_does(finished_tiny, tmp_path, devices):
    one, many = own_copy(finished_tiny, tmp_path / "one"), own_copy(finished_tiny, tmp_path / "many")
    before = labels_kinds(many)
    alone = invoke("label", "--round", 2, "--workdir", one, "--queries", QUERIES, "--seed", SEED)
    assert alone.exit_code == 0, alone.output

    first, second = launch([many, many], devices=devices)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "(2 processes, each its own block of heads)" in first.stdout
    assert ("process 1 of 2: round-2 heads 3-5 fitted on their own shards voted on "
            f"{QUERIES} queries") in second.stdout, second.stdout
    assert "wrote" not in second.stdout and not second.stderr.strip()
    # The same votes and (seeded) labels, whichever processes fitted the heads.
    for name in (rundir.VOTES_ROUND2_NPZ, rundir.LABELS_ROUND2_NPZ):
        assert released(one / name) == released(many / name), name
    assert (many / rundir.VOTES_ROUND2_NPZ).stat().st_mode & 0o077 == 0  # private, as one process writes it
    # The same figures printed (the heads' accuracies come from the summed counts).
    summary = [line for line in alone.output.splitlines() if line.startswith(("round 2:", "round-2 teachers",
                                                                             "accuracy of"))]
    assert summary and all(line in first.stdout for line in summary), (summary, first.stdout)
    # Round 2 charged once by the cluster (process 0), as once by the one process.
    assert labels_kinds(many) == before + ["labels-2", "labels-2"]
    assert names(many) == names(one)  # no staging or lock left behind


@pytest.mark.slow  # two launches of two JAX processes each: 30-60 s
def test_a_process_that_fails_stops_every_process_with_one_line_and_nothing_charged(finished_tiny, tmp_path):
    run = own_copy(finished_tiny, tmp_path / "run")
    before = labels_kinds(run)
    # Process 1's copy of the run has no round-1 student (a host that does not see it).
    blind = tmp_path / "blind"
    blind.mkdir()
    (blind / rundir.CONFIG_TOML).write_bytes((run / rundir.CONFIG_TOML).read_bytes())
    assert str(blind) in stopped_by(launch([run, blind]), culprit=1)
    assert not (run / rundir.LABELS_ROUND2_NPZ).exists() and not (run / rundir.VOTES_ROUND2_NPZ).exists()
    assert labels_kinds(run) == before

    # Process 0 refuses in its door (round 2 is there already): process 1 stops too.
    assert invoke("label", "--round", 2, "--workdir", run, "--queries", QUERIES, "--seed", SEED).exit_code == 0
    kept = {name: (run / name).read_bytes() for name in (rundir.VOTES_ROUND2_NPZ, rundir.LABELS_ROUND2_NPZ)}
    assert "--overwrite" in stopped_by(launch([run, run]), culprit=0)
    assert {name: (run / name).read_bytes() for name in kept} == kept
    assert labels_kinds(run) == before + ["labels-2"]


@pytest.mark.slow  # one launch of two JAX processes, one of them killed: 15-30 s
def test_a_killed_process_stops_the_other_at_once_with_nothing_charged(finished_tiny, tmp_path):
    run = own_copy(finished_tiny, tmp_path / "run")
    before = labels_kinds(run)
    # process 0 chose the queries: both go on to their heads
    first, waited = kill_one_after(start([run, run]), "round 2:", timeout=90)
    _, err = first.stdout, first.stderr
    # One line at once, not JAX's shutdown barrier waiting 100 s for the dead process and aborting.
    assert first.returncode == 1 and waited < 60, (waited, err[-2000:])
    (line,) = [line for line in err.splitlines() if line.startswith("pate: ")]
    assert "lost the other processes" in line, line
    assert "Traceback" not in err and "Check failure stack trace" not in err
    assert not (run / rundir.LABELS_ROUND2_NPZ).exists() and not (run / rundir.VOTES_ROUND2_NPZ).exists()
    assert labels_kinds(run) == before
    # The next command finds the run as it was and releases round 2 once.
    again = invoke("label", "--round", 2, "--workdir", run, "--queries", QUERIES, "--seed", SEED)
    assert again.exit_code == 0, again.output
    assert labels_kinds(run) == before + ["labels-2"]


@pytest.mark.parametrize("count", [2, 4])
def test_a_block_of_heads_is_the_same_heads_as_all_of_them(count):
    """Each process's block of heads, fitted and voting on its own (the features of its shards in
    batches of one shard, the heads mapped one by one), equals those heads fitted beside all
    the others, bit for bit; the blocks' vote counts sum to the ensemble's."""
    import jax.numpy as jnp

    from pate.programs import cluster, heads

    rng = np.random.default_rng(3)
    T, n, k, C, Q = 7, 9, 5, 4, 11
    z = rng.normal(size=(T, n, k)).astype(np.float32)
    y = rng.integers(0, C, size=(T, n))
    q = jnp.asarray(rng.normal(size=(Q, k)).astype(np.float32))
    w, b = heads.fit_heads(jnp.asarray(z), jnp.asarray(y), 0.5, num_classes=C)
    blocks = [cluster.block(T, count, p) for p in range(count)]
    counts = []
    for rows in blocks:
        if not rows:
            counts.append(np.zeros((Q, C), np.int32))
            continue
        wp, bp = heads.fit_heads(jnp.asarray(z[rows.start:rows.stop]), jnp.asarray(y[rows.start:rows.stop]), 0.5,
                                 num_classes=C)
        assert np.asarray(wp).tobytes() == np.asarray(w[rows.start:rows.stop]).tobytes()
        assert np.asarray(bp).tobytes() == np.asarray(b[rows.start:rows.stop]).tobytes()
        counts.append(np.asarray(heads.head_votes(wp, bp, q, num_classes=C)))
    total = cluster.exact_sum(np.stack(counts), [len(rows) for rows in blocks])
    np.testing.assert_array_equal(total, np.asarray(heads.head_votes(w, b, q, num_classes=C)))


def test_a_shards_features_do_not_depend_on_the_shards_beside_it(finished_tiny):
    """`heads.features` with ``group``: shard t's rows give the same features, bit for bit, alone
    or among every shard (no batch crosses a shard), even where a batch is smaller than a shard."""
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.programs import heads
    from pate.programs.student_training import load_student

    config = load_config(finished_tiny / rundir.CONFIG_TOML)
    student = load_student(finished_tiny)
    x = split(load_dataset(config.data), config.data.public_size).train_x[:60]
    for batch in (7, 500):
        every = heads.features(student.model, student.params, x, batch, group=20)
        alone = heads.features(student.model, student.params, x[20:40], batch, group=20)
        assert every[20:40].tobytes() == alone.tobytes()
    with pytest.raises(ValueError, match="not groups"):
        heads.features(student.model, student.params, x[:50], 7, group=20)
