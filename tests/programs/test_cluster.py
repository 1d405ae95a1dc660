"""The collectives of a distributed command without processes (`pate.programs.cluster`): the
blocks of the teacher axis, the exact sum of the processes' vote counts against a plain loop
over every teacher's vote, and the agreement that stops every process when one fails, on
an all-gather the test plays for the other processes. tests/steps/test_label_distributed.py
runs the same code on real processes."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import Others
from pate.programs import cluster as cl


@pytest.mark.parametrize("rows, count", [(6, 1), (6, 2), (6, 4), (7, 3), (3, 5), (250, 8), (0, 2)])
def test_the_blocks_cover_every_row_once_in_order(rows, count):
    blocks = [cl.block(rows, count, p) for p in range(count)]
    assert [r for b in blocks for r in b] == list(range(rows))
    per = -(-rows // count)
    assert all(len(b) <= per for b in blocks)
    # The blocks are those of the axis padded to a multiple of `count` and sharded over one
    # device per process (`placement.process_blocks`): block p starts at p * per.
    assert all(b.start == min(p * per, rows) for p, b in enumerate(blocks))


def plain_votes(preds: np.ndarray, num_classes: int) -> np.ndarray:
    """The vote histogram by a plain loop over teachers and points (the second implementation)."""
    out = np.zeros((preds.shape[1], num_classes), np.int64)
    for t in range(preds.shape[0]):
        for i in range(preds.shape[1]):
            out[i, preds[t, i]] += 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_sum_of_the_blocks_counts_is_the_ensembles_vote(seed):
    from pate.programs.voting import votes_from_predictions

    rng = np.random.default_rng(seed)
    teachers, points, classes, count = rng.integers(1, 12), rng.integers(1, 9), rng.integers(2, 6), rng.integers(1, 6)
    preds = rng.integers(0, classes, size=(teachers, points))
    blocks = [cl.block(teachers, count, p) for p in range(count)]
    counts = np.stack([votes_from_predictions(preds[b.start:b.stop], classes) for b in blocks])
    assert counts.dtype == np.int32
    total = cl.exact_sum(counts, [len(b) for b in blocks])
    assert total.dtype == np.int32
    np.testing.assert_array_equal(total, plain_votes(preds, classes))


def test_the_sum_is_exact_where_float32_is_not():
    # 2**24 + 1 votes are not a float32; the all-gather moves int32 and the host adds in int64.
    big = 2 ** 24
    counts = np.array([[[big, 0]], [[1, 0]]], np.int32)
    assert cl.exact_sum(counts, [big, 1])[0, 0] == big + 1
    assert np.float32(big) + np.float32(1) == np.float32(big)  # what a float sum would have made


@pytest.mark.parametrize("counts, teachers", [
    (np.array([[[2, 1]], [[1, 1]]], np.int32), [3, 3]),      # a row missing a teacher
    (np.array([[[4, -1]], [[1, 2]]], np.int32), [3, 3]),     # a negative count
    (np.array([[[2.0, 1.0]], [[1.0, 2.0]]]), [3, 3]),         # not integers
])
def test_counts_that_do_not_count_each_teacher_once_are_refused(counts, teachers):
    with pytest.raises(PateError, match="internal error"):
        cl.exact_sum(counts, teachers)


def test_a_status_carries_the_line_and_process_0s_value():
    words = np.stack([cl.status(value=42), cl.status("votes.npz is missing"), cl.status(value=7)])
    assert cl.decide(words[[0, 2]], 1) == 42  # nobody failed: process 0's value
    with pytest.raises(cl.Stopped) as err:
        cl.decide(words, 0)
    assert str(err.value) == ("process 1 of 3 failed, so every process stopped (nothing was charged or written): "
                              "votes.npz is missing")
    assert cl.decide(words, 1) == 42  # its own failure is its own error, raised by itself


def test_a_long_line_is_cut_on_a_character():
    line = "é" * cl.MESSAGE_BYTES  # two bytes each: the cut falls inside one
    words = np.stack([cl.status(), cl.status(line)])
    with pytest.raises(cl.Stopped) as err:
        cl.decide(words, 0)
    said = str(err.value).split(": ", 1)[1]
    assert said == "é" * (cl.MESSAGE_BYTES // 2)


def test_one_process_is_a_cluster_of_one():
    one = cl.Cluster(0, 1)
    assert one.leader and one.rows(6) == range(6)
    assert one.agree(5) == 5
    counts = np.array([[1, 2], [3, 0]], np.int32)
    np.testing.assert_array_equal(one.sum_counts(counts, 3), counts)


def test_every_process_gets_the_sum_and_stops_together_when_it_ends_well():
    theirs = np.array([[0, 3], [2, 1]], np.int32)  # process 1's 3 teachers
    gather = Others(cl.status(), cl.status(), theirs, cl.status())
    me = cl.Cluster(0, 2, gather)
    with me.together():
        assert me.agree(9) == 9
        mine = np.array([[3, 0], [1, 2]], np.int32)
        np.testing.assert_array_equal(me.sum_counts(mine, 6), [[3, 3], [3, 3]])
    assert len(gather.sent) == 4 and not gather.theirs  # the last agreement: both ended well


def test_a_process_that_fails_tells_the_others_and_raises_its_own_error():
    gather = Others(cl.status(), cl.status(), index=1)
    me = cl.Cluster(1, 2, gather)
    with pytest.raises(ValueError, match="bad\npool"):
        with me.together():
            me.agree()
            raise ValueError("bad\npool")
    told = gather.sent[-1]
    assert told[0] == 1 and bytes(told[3:3 + told[2]].astype(np.uint8)) == b"bad pool"


def test_when_another_process_fails_this_one_stops_without_a_second_word():
    gather = Others(cl.status("another pate process holds the run's lock"), index=1)
    me = cl.Cluster(1, 2, gather)
    ran = []
    with pytest.raises(cl.Stopped, match="process 0 of 2 failed.*holds the run's lock"):
        with me.together():
            me.agree()
            ran.append("voted")
    assert ran == [] and len(gather.sent) == 1


def test_counts_must_travel_as_int32():
    with pytest.raises(PateError, match="int32"):
        cl.Cluster(0, 1).sum_counts(np.zeros((2, 2), np.int64), 0)


def test_a_collective_that_fails_ends_in_one_line_and_tells_no_one(monkeypatch):
    monkeypatch.setattr(cl, "_LOST", False)
    calls = []

    def broken(x):
        calls.append(x)
        raise RuntimeError("Gloo AllGather failed: Connection closed by peer\n(more lines)")

    me = cl.Cluster(0, 2, broken)
    with pytest.raises(PateError, match=r"^lost the other processes of the cluster \(Gloo AllGather failed: "
                                        r"Connection closed by peer\); see their output"):
        with me.together():
            me.agree()
    assert len(calls) == 1  # no second word into a broken collective
    assert cl.lost()  # so the process leaves without JAX's shutdown barrier


def test_a_failure_told_at_the_last_agreement_claims_nothing_about_charges():
    # Process 0 fails in its commit (after the counts): it may have charged, so process 1's
    # line says only that it stopped, and why.
    theirs = np.array([[3, 0]], np.int32)
    gather = Others(cl.status(), cl.status(), theirs, cl.status("cannot swap the new label artifacts in"), index=1)
    me = cl.Cluster(1, 2, gather)
    with pytest.raises(cl.Stopped) as err:
        with me.together():
            me.agree()
            me.sum_counts(np.array([[0, 3]], np.int32), 6)
    assert str(err.value) == "process 0 of 2 failed, so every process stopped: cannot swap the new label artifacts in"


def test_every_process_gets_process_0s_shared_values():
    chosen = np.array([17, 3, 250_000, 9], np.int64)  # round 2's queries, as process 0 chose them
    gather = Others(np.zeros(4, np.int32), index=0)
    assert cl.Cluster(0, 2, gather).share(chosen).tolist() == chosen.tolist()
    gather = Others(chosen.astype(np.int32), index=1)  # process 1 sends zeros of the same shape
    assert cl.Cluster(1, 2, gather).share(np.zeros(4, np.int32)).tolist() == chosen.tolist()
    assert cl.Cluster(0, 1).share(chosen).dtype == np.int32
    for bad in (np.array([2.0**31]), np.array([2**31], np.int64), np.array([0.5])):
        with pytest.raises(PateError, match="int32"):
            cl.Cluster(0, 1).share(bad)
