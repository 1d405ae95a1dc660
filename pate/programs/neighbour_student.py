"""A neighbour student (`[student] neighbours`): each input labelled by the released labels of its
K nearest labelled pool points under the public map `[features]` names, averaged with the
network's softmax to make the published predictor (issue 55).

The map is fitted on the public pool alone (`pate.programs.public_features.fit`, with
`[fine_grained] pca` directions and `[features] whiten`, as the fine-grained release fits it),
and an input's row is `PublicMap.unit_rows` of its coefficients: a function of that input and of
public values. The votes: the r-th nearest labelled pool point (squared Euclidean distance,
ties broken by the lower pool index) adds 1/r to its released label, the sum over the K nearest
scaled to 1. So the predictor is post-processing of the released labels with public inputs and
spends no ε; the pool's true labels are never read.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.core.errors import PateError
from pate.programs import public_features

#: Inputs per distance block (memory: block x labelled pool points float64).
BLOCK = 500


@dataclasses.dataclass(frozen=True)
class NeighbourVote:
    """The fitted public map, the labelled pool points' rows and released labels, and K."""

    fitted: public_features.PublicMap
    rows: np.ndarray  # (n, d) float64: the labelled pool points under the map
    targets: np.ndarray  # (n, num_classes) float64: their released labels one-hot, or the student's soft targets
    k: int
    num_classes: int

    def votes(self, inputs: np.ndarray) -> np.ndarray:
        """(m, num_classes) each input's weighted label fractions over its K nearest labelled pool
        points (each row sums to 1)."""
        x = self.fitted.unit_rows(self.fitted.coefficients(inputs))
        k = min(self.k, self.rows.shape[0])
        weights = 1.0 / np.arange(1, k + 1)
        norms = np.einsum("ij,ij->i", self.rows, self.rows)
        out = np.zeros((x.shape[0], self.num_classes))
        for start in range(0, x.shape[0], BLOCK):
            d = norms[None, :] - 2.0 * x[start:start + BLOCK] @ self.rows.T
            nearest = np.argsort(d, axis=1, kind="stable")[:, :k]
            out[start:start + nearest.shape[0]] = np.einsum("ikc,k->ic", self.targets[nearest], weights)
        return out / out.sum(axis=1, keepdims=True)


def fit(config, pool_x: np.ndarray, indices: np.ndarray, labels: np.ndarray, num_classes: int,
        targets: np.ndarray | None = None) -> NeighbourVote:
    """The neighbour student of `config` (`[student] neighbours` K, `[features]`'s map) on the
    public pool `pool_x` and the released `labels` of the pool points `indices`; with `targets`
    ((n, num_classes) rows summing to 1: the student's soft targets), those instead of the labels.

    Raises:
      PateError: no labelled pool point, or what fitting the map raises (one line).
    """
    k = config.student.neighbours
    if k < 1 or np.size(indices) == 0:
        raise PateError("student.neighbours needs K >= 1 and at least one released label")
    f = config.features
    dims = min(config.fine_grained.pca, pool_x.shape[0])
    fitted, _ = public_features.fit(pool_x, dims, feature_map=f.map,
                                    settings=public_features.MapSettings.of(config), whiten=f.whiten)
    rows = fitted.unit_rows(fitted.coefficients(pool_x[np.asarray(indices)]))
    chosen = (np.eye(num_classes)[np.asarray(labels, np.int64)] if targets is None
              else np.asarray(targets, np.float64))
    return NeighbourVote(fitted, rows, chosen, k, num_classes)


def combine(probabilities: np.ndarray, votes: np.ndarray) -> np.ndarray:
    """The published predictor's class: the network's softmax plus the neighbours' fractions."""
    return np.argmax(np.asarray(probabilities, np.float64) + votes, axis=1)
