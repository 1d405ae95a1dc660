"""`pate label --distributed` of a fine-grained release: each process counts the votes of its own
slice of the private records, the histograms are summed exactly, and process 0 alone draws,
charges and writes. The fast tests hold the slicing and the sum without processes (every layout
gives the one-process histogram, record rows computed alike in any slice); the slow ones launch
two real local JAX processes (gloo on CPU; 2-20 s each on the shared 2-core machine, by its load) and compare
the histogram's digest (through the test hook `fine_grained_release.on_histogram`) and the
seeded labels with one process's."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.mechanisms import fine_grained
from pate.config import load_config
from pate.data import load_dataset, split
from pate.programs import cluster as cluster_mod
from pate.release import fine_grained_release as fine_release
from pate.store import rundir

from conftest import kill_one_after, ROOT, TINY, finish_processes, invoke, released, run_entries, start_processes

SEED = 11


def _config(**extra):
    return load_config(TINY, {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 16,
                              "fine_grained.votes_per_record": 3, **extra})


def _digest(histogram) -> str:
    return hashlib.sha256(np.ascontiguousarray(histogram, np.int64).tobytes()).hexdigest()


# ------------------------------------------------------------------ fast: no processes


@pytest.fixture(scope="module")
def tiny_side():
    config = _config()
    splits = split(load_dataset(config.data), config.data.public_size)
    noise = fine_release.check_settings(config, splits.pool_x.shape[0], splits.train_x)
    side = fine_release.public_side(config, splits.pool_x, splits.num_classes, noise, echo=lambda _l: None)
    return config, splits, side


@pytest.mark.parametrize("chunk, layouts", [(1000, (1, 2)), (128, (1, 3, 5))])  # 128: chunks cut the slices
def test_every_layout_sums_to_the_one_process_histogram(tiny_side, monkeypatch, chunk, layouts):
    """Slices of ceil(N/P) records, each mapped and counted alone, summed by
    `exact_histogram_sum`: the histogram of a plain loop over every record."""
    config, splits, side = tiny_side
    monkeypatch.setattr(fine_release, "ROW_CHUNK", chunk)
    k, n = config.fine_grained.votes_per_record, splits.train_x.shape[0]
    # Every record at once (rows, then neighbours: each row a function of its record alone).
    neighbours = fine_grained.nearest_public(side.fmap.rows(splits.train_x), side.pool_rows, k)
    plain = np.zeros((side.pool_size, side.num_classes), np.int64)
    for i in range(n):
        for j in neighbours[i]:
            plain[j, splits.train_y[i]] += 1
    for processes in layouts:
        blocks = [cluster_mod.block(n, processes, p) for p in range(processes)]
        assert [i for b in blocks for i in b] == list(range(n))  # the records once, in order
        counts = np.stack([fine_release.slice_counts(side, config.fine_grained, splits.train_x[b.start:b.stop],
                                                     splits.train_y[b.start:b.stop], b.start, None)
                           for b in blocks]).astype(np.int32)
        total = cluster_mod.exact_histogram_sum(counts, [len(b) * k for b in blocks])
        assert total.dtype == np.int64 and np.array_equal(total, plain), processes


def test_more_processes_than_records_leave_the_last_ones_nothing_to_count(tiny_side):
    config, splits, side = tiny_side
    x, y, k = splits.train_x[:5], splits.train_y[:5], config.fine_grained.votes_per_record
    blocks = [cluster_mod.block(5, 7, p) for p in range(7)]  # 1, 1, 1, 1, 1, 0, 0 records
    assert [len(b) for b in blocks] == [1, 1, 1, 1, 1, 0, 0]
    counts = np.stack([fine_release.slice_counts(side, config.fine_grained, x[b.start:b.stop], y[b.start:b.stop],
                                                 b.start, None) for b in blocks])
    assert not counts[5:].any()
    total = cluster_mod.exact_histogram_sum(counts, [len(b) * k for b in blocks])
    assert np.array_equal(total, fine_release.slice_counts(side, config.fine_grained, x, y, 0, None))


def test_a_record_maps_to_the_same_row_in_any_slice(tiny_side, monkeypatch):
    config, splits, side = tiny_side
    monkeypatch.setattr(fine_release, "ROW_CHUNK", 64)
    whole = fine_release.private_rows(side.fmap, splits.train_x, 0)
    assert whole.shape == (splits.train_x.shape[0], config.fine_grained.pca)
    for start, stop in ((0, 1), (63, 65), (100, 480), (479, 480), (5, 5)):
        assert np.array_equal(fine_release.private_rows(side.fmap, splits.train_x[start:stop], start),
                              whole[start:stop])


def test_the_sum_refuses_counts_that_do_not_add_up_and_never_wraps():
    counts = np.zeros((2, 3, 2), np.int32)
    counts[0, 0, 0], counts[1, 2, 1] = 4, 6
    assert cluster_mod.exact_histogram_sum(counts, [4, 6]).tolist() == [[4, 0], [0, 0], [0, 6]]
    with pytest.raises(PateError, match="process 1's histogram does not count its 5 votes once"):
        cluster_mod.exact_histogram_sum(counts, [4, 5])
    big = np.full((3, 1, 2), 2**31 - 1, np.int32)  # each cell int32's largest: the sum is int64
    assert cluster_mod.exact_histogram_sum(big, [2 * (2**31 - 1)] * 3).tolist() == [[3 * (2**31 - 1)] * 2]


def test_sum_histograms_agrees_first_and_gathers_int32():
    """`Cluster.sum_histograms` on a cluster of two whose gather is a stand-in: an agreement,
    then the counts travel as int32 and come back summed in int64."""
    sent = []
    mine, theirs = np.array([[2, 0], [0, 1]], np.int64), np.array([[0, 0], [3, 0]], np.int64)

    def gather(x):
        sent.append(x)
        if x.shape == mine.shape:
            return np.stack([x, theirs.astype(np.int32)])
        return np.stack([x, cluster_mod.status()])

    total = cluster_mod.Cluster(0, 2, gather=gather).sum_histograms(mine, [3, 3])
    assert total.tolist() == [[2, 0], [3, 1]]
    assert sent[0].shape == cluster_mod.status().shape and sent[1].dtype == np.int32


def test_randomized_response_draws_apart_from_the_central_noise():
    """A seeded release's central noise is the seed's labels stream whatever randomized response
    drew (so it is the same in any layout); each process's responses have their own stream."""
    from analysis.core.noise import LABELS_STREAM, NoiseSource

    words = [fine_release.rr_source(5, p).uint64(4).tolist() for p in (0, 1)]
    assert words[0] != words[1] and words[0] != NoiseSource(5, LABELS_STREAM).uint64(4).tolist()
    assert not fine_release.rr_source(None, 0).seeded


# ------------------------------------------------------------------ slow: real processes

#: Runs the CLI with the test hook recording the digest of the summed histogram (process p
#: writes it to $DIGEST_TO.p); nothing else differs from `pate`.
HOOKED = """
import hashlib, os, runpy, sys
import numpy as np
sys.path.insert(0, {root!r})
from pate.release import fine_grained_release as f
def hook(h):
    name = os.environ["DIGEST_TO"] + "." + sys.argv[sys.argv.index("--process-id") + 1]
    with open(name, "w") as out:
        out.write(hashlib.sha256(np.ascontiguousarray(h, np.int64).tobytes()).hexdigest())
f.on_histogram = hook
sys.argv = [{cli!r}, *sys.argv[1:]]
runpy.run_path({cli!r}, run_name="__main__")
"""


def launch(workdir, configs, digest_to, *extra, timeout: float = 240):
    """``pate label --distributed`` of `workdir` as len(configs) local processes (process p
    reads ``configs[p]``), each with one CPU device; their results by process id."""
    script = HOOKED.format(root=str(ROOT), cli=str(ROOT / "cli.py"))
    procs = start_processes([["-c", script, "label", "--workdir", workdir, "--config", c, "--seed", SEED, *extra]
                             for c in configs], env={"DIGEST_TO": str(digest_to)})
    return finish_processes(procs, timeout)


def _fine_toml(tmp_path, name="fine.toml", **sections) -> str:
    text = TINY.read_text().replace('mechanism = "lnmax"', 'mechanism = "fine-grained"', 1)
    extra = "".join(f"{k} = {v}\n" for k, v in sections.items())
    path = tmp_path / name
    path.write_text(text + "\n[fine_grained]\npca = 16\nvotes_per_record = 3\n" + extra)
    return str(path)


@pytest.mark.slow  # one release in-process, one launch of 2 JAX processes: 5-15 s on the shared 2-core machine
def test_two_processes_release_what_one_process_does(tmp_path, monkeypatch):
    config = _fine_toml(tmp_path)
    one, many = tmp_path / "one", tmp_path / "many"
    seen = []
    monkeypatch.setattr(fine_release, "on_histogram", lambda h: seen.append(_digest(h)))
    alone = invoke("label", "--workdir", one, "--config", config, "--seed", SEED)
    assert alone.exit_code == 0, alone.output

    first, second = launch(many, [config, config], tmp_path / "digest")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "480 private records each vote for their 3 nearest pool point(s) (2 processes" in first.stdout
    assert "process 1 of 2: private records 240-479 voted (480 in all)" in second.stdout, second.stdout
    assert "wrote" not in second.stdout and not second.stderr.strip()
    # The exact histogram before the noise, the same whatever the layout, on both processes.
    assert [(tmp_path / f"digest.{p}").read_text() for p in (0, 1)] == seen * 2
    # The same seeded labels; charged once by the cluster (process 0), as once by the one process.
    assert released(one / rundir.LABELS_NPZ) == released(many / rundir.LABELS_NPZ)
    entries = run_entries(many)  # the data set's ledger: both releases
    assert [e["kind"] for e in entries] == ["labels", "labels"]
    assert sorted(e.get("run") for e in entries) == sorted([str(one), str(many)])
    assert sorted(os.listdir(many)) == sorted(os.listdir(one))  # no staging or lock left behind


@pytest.mark.slow  # two launches of 2 JAX processes: 6-20 s
def test_randomized_response_and_a_failing_process(tmp_path):
    """With randomized response each process randomises its own records (the histogram still
    counts every record's k votes once); a process that sees other data stops both, nothing
    charged."""
    config = _fine_toml(tmp_path, label_noise='"randomized-response"', label_eps=2.0)
    run = tmp_path / "run"
    first, second = launch(run, [config, config], tmp_path / "digest")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "randomized response at eps 2 (by the process that holds it)" in first.stdout
    assert (tmp_path / "digest.0").read_text() == (tmp_path / "digest.1").read_text()
    assert [e["kind"] for e in run_entries(run)] == ["labels"]

    other = tmp_path / "other.toml"  # another data set: 400 private records
    other.write_text(open(config).read().replace("synthetic_train_size = 480", "synthetic_train_size = 400"))
    fresh = tmp_path / "fresh"
    first, second = launch(fresh, [config, other], tmp_path / "none")
    assert first.returncode == 1 and second.returncode == 1
    line = "process 1's data.synthetic_train_size (400) differs from process 0's (and 1 more)"
    assert [line in x for x in second.stderr.strip().splitlines()] == [True], second.stderr
    (stopped,) = first.stderr.strip().splitlines()
    assert stopped.startswith("pate: process 1 of 2 failed, so every process stopped (nothing was charged or "
                              "written): ") and line in stopped
    assert not (fresh / rundir.LABELS_NPZ).exists() and run_entries(fresh) == []


@pytest.mark.slow  # one launch of 2 JAX processes, one of them killed: 2-12 s
def test_a_killed_process_stops_the_other_at_once_with_nothing_charged(tmp_path):
    config = _fine_toml(tmp_path)
    run = tmp_path / "run"
    # past the first agreement: both map their records
    first, waited = kill_one_after(start_processes([[ROOT / "cli.py", "label", "--workdir", run, "--config", config]] * 2), "fine-grained: the map", timeout=90)
    _, err = first.stdout, first.stderr
    # One line at once, not JAX's shutdown barrier waiting 100 s for the dead process.
    assert first.returncode == 1 and waited < 60, (waited, err[-2000:])
    (line,) = [line for line in err.splitlines() if line.startswith("pate: ")]
    print(f"process 0 left {waited:.1f} s after the kill: {line}")
    assert "lost the other processes" in line, line
    assert "Traceback" not in err and "Check failure stack trace" not in err
    assert not (run / rundir.LABELS_NPZ).exists() and run_entries(run) == []
    again = invoke("label", "--workdir", run, "--config", config)  # the next command releases once
    assert again.exit_code == 0, again.output
    assert [e["kind"] for e in run_entries(run)] == ["labels"]
