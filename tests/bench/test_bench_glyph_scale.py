"""bench/glyph_scale.py's simulated teachers: one (points, classes) int32 histogram whose every
row counts each teacher once, the same for the same seed, the truth the plurality of most
points (the teachers are right more often than any single wrong class), and some points'
plurality a confusable class (hard points exist). Speed is measured by the bench, never here."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import bench_module


def test_simulated_votes_count_every_teacher_once_and_repeat_with_the_seed():
    simulate = bench_module("glyph_scale").simulate_votes
    votes, truth = simulate(300, teachers=500, classes=20, seed=3, block=64)  # blocks of 64: a short last one
    assert votes.shape == (300, 20) and votes.dtype == np.int32 and truth.shape == (300,)
    assert (votes.sum(axis=1) == 500).all() and (votes >= 0).all()
    assert truth.min() >= 0 and truth.max() < 20
    again, truth_again = simulate(300, teachers=500, classes=20, seed=3, block=64)
    assert np.array_equal(votes, again) and np.array_equal(truth, truth_again)
    other, _ = simulate(300, teachers=500, classes=20, seed=4, block=64)
    assert not np.array_equal(votes, other)
    plurality_right = np.mean(votes.argmax(axis=1) == truth)
    assert 0.6 < plurality_right < 1.0


def test_the_block_size_does_not_change_the_votes_shape_or_totals():
    simulate = bench_module("glyph_scale").simulate_votes
    votes, _ = simulate(10, teachers=7, classes=6, seed=0, block=1)
    assert votes.shape == (10, 6) and (votes.sum(axis=1) == 7).all()
    with pytest.raises(ValueError, match="at least 6 classes"):
        simulate(10, teachers=7, classes=5)
