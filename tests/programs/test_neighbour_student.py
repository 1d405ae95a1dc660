"""The neighbour student (`pate.programs.neighbour_student`, `[student] neighbours`): its votes
against a plain loop over the labelled pool points, on rows and on images; each input's votes a
function of that input, the public pool and the released labels alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import TINY
from pate.config import load_config
from pate.programs import neighbour_student


def _plain_votes(pool_rows, labels, rows, k, classes):
    out = []
    for x in rows:
        d = [float(np.sum((x - p) ** 2)) for p in pool_rows]
        order = sorted(range(len(d)), key=lambda i: (d[i], i))[:k]
        v = np.zeros(classes)
        for r, i in enumerate(order, start=1):
            v[labels[i]] += 1.0 / r
        out.append(v / v.sum())
    return np.array(out)


@pytest.mark.parametrize("feature_map, shape, whiten", [("none", (12,), False), ("pixels", (6, 6, 1), True)])
def test_the_votes_are_the_plain_loops(feature_map, shape, whiten):
    rng = np.random.default_rng(0)
    config = load_config(TINY, {"features.map": feature_map, "features.whiten": whiten, "fine_grained.pca": 5,
                                "student.neighbours": 4})
    pool = rng.random((40, *shape), dtype=np.float32)
    indices = np.array([3, 5, 7, 11, 13, 17, 19, 23, 29, 31])
    labels = rng.integers(0, 3, indices.size)
    vote = neighbour_student.fit(config, pool, indices, labels, 3)
    inputs = rng.random((9, *shape), dtype=np.float32)
    got = vote.votes(inputs)
    rows = vote.fitted.unit_rows(vote.fitted.coefficients(inputs))
    want = _plain_votes(vote.rows, labels, rows, 4, 3)
    np.testing.assert_allclose(got, want, atol=1e-12)
    # one input's votes do not depend on what else is asked with it
    np.testing.assert_allclose(vote.votes(inputs[4:5]), got[4:5], atol=1e-12)
    # with K = 1 a labelled pool point is its own nearest neighbour: its released label
    assert np.all(dataclasses.replace(vote, k=1).votes(pool[indices]).argmax(1) == labels)


def test_combine_adds_the_networks_softmax_and_the_votes():
    probs = np.array([[0.6, 0.4, 0.0], [0.1, 0.2, 0.7]])
    votes = np.array([[0.0, 1.0, 0.0], [0.5, 0.4, 0.1]])
    assert neighbour_student.combine(probs, votes).tolist() == [1, 2]


def test_no_released_label_is_one_line():
    config = load_config(TINY, {"features.map": "none", "student.neighbours": 3, "fine_grained.pca": 2})
    with pytest.raises(PateError, match="at least one released label"):
        neighbour_student.fit(config, np.zeros((5, 4), np.float32), np.array([], np.int64), np.array([]), 2)
