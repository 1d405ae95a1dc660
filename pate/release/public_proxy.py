"""The public proxy of a fine-grained release: the labelled public pool cut in two, its first
half standing in for the private records and its second half for the pool, so that a release
can be simulated, and its settings or a feature map judged, without reading a private record.

The pool's labels are public data here (the benchmark protocol keeps them to score the
student), so every figure computed on the proxy is benchmark output on public data: it spends
no ε. `bench/fine_grained.py` chooses the release's settings on it; `pate ceiling`
(`pate.release.ceiling`) measures a map's noiseless ceilings on it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import fine_grained as fg
from pate.programs import public_features


@dataclasses.dataclass(frozen=True)
class Halves:
    """The pool cut in two: the stand-in private records (the first half), the stand-in pool
    (the second), each as its map's quantised rows, and the map fitted on the stand-in pool."""

    private_rows: np.ndarray  # (n_a, dims) int64
    private_y: np.ndarray
    pool_rows: np.ndarray  # (n_b, dims) int64
    pool_y: np.ndarray
    fitted: public_features.PublicMap


def cut(pool_x: np.ndarray, pool_y: np.ndarray, feature_map: str, dims: int, *,
        settings: public_features.MapSettings = public_features.MapSettings(), whiten: bool = False,
        parts: dict | None = None) -> Halves:
    """The proxy of a pool: the map `feature_map` (`pate.programs.public_features.fit`) and its
    PCA to ``dims`` fitted on the second half alone, as a real release fits them on the pool
    alone; the first half's rows through that map, as a private record's are. `parts`: a dict
    that keeps each part's coefficients of the whole pool by name, so that several maps sharing
    a part compute it once (`pate ceiling --maps`).

    Raises:
      PateError: fewer than 4 pool points, or the map does not take these inputs.
    """
    n = int(np.shape(pool_x)[0])
    if n < 4:
        raise PateError(f"the public pool has {n} points; the proxy cuts it in two halves of at least 2: "
                        "raise data.public_size")
    half = n // 2
    public_features.check_ready(feature_map, settings)
    parts = {} if parts is None else parts
    blocks = []
    for name in feature_map.split("+"):
        if name not in parts:
            parts[name] = np.asarray(public_features.part_coefficients(name, pool_x, settings)[0], np.float64)
        blocks.append(parts[name])
    fitted, pool_rows = public_features.fit_parts([b[half:] for b in blocks], dims, feature_map=feature_map,
                                                  settings=settings, whiten=whiten)
    private = [scale * b[:half] for scale, b in zip(fitted.scales, blocks)]
    private_rows = fitted.rows(None, private[0] if len(private) == 1 else np.concatenate(private, axis=1))
    return Halves(private_rows, np.asarray(pool_y[:half]), pool_rows, np.asarray(pool_y[half:]), fitted)


class Problem:
    """One labelling problem: the private side's neighbours (up to `k_max`) and labels, the
    pool's graph (up to `m_max`), the pool's true labels for scoring."""

    def __init__(self, private_q, private_y, pool_q, pool_y, num_classes: int, k_max: int, m_max: int):
        self.neighbours = fg.nearest_public(private_q, pool_q, k_max)
        self.graph = fg.nearest_public(pool_q, pool_q, m_max)
        self.private_y, self.pool_y = np.asarray(private_y), np.asarray(pool_y)
        self.num_classes = int(num_classes)
        self._counts = {}

    def counts(self, k: int) -> np.ndarray:  # PRIVATE on the real problem: only `release` reads them
        if k not in self._counts:
            self._counts[k] = fg.vote_histogram(self.neighbours[:, :k], self.private_y, len(self.pool_y),
                                                self.num_classes)
        return self._counts[k]

    def labels(self, k: int, m: int, noise: fg.Noise | None, source: NoiseSource | None,
               weights: str = "uniform") -> np.ndarray:
        """The pool's labels after one release (noise None: the noiseless reference, no draw)."""
        released = self.counts(k) if noise is None else fg.release(self.counts(k), noise, source)
        return fg.labels_and_margins(fg.smooth(released, self.graph[:, :m], weights))[0]

    def accuracy(self, k: int, m: int, noise: fg.Noise | None, source: NoiseSource | None,
                 weights: str = "uniform") -> float:
        """Label accuracy over the whole pool after one release (noise None: the noiseless reference)."""
        return float(np.mean(self.labels(k, m, noise, source, weights) == self.pool_y))


def forward_knn(private_q, private_y, pool_q, pool_y, num_classes: int, m: int) -> float:
    """Non-private reference: each pool point takes the plurality label of its m nearest
    private records (ties to the lowest class)."""
    idx = fg.nearest_public(pool_q, private_q, m, batch=256)
    votes = np.zeros((len(pool_y), num_classes), np.int64)
    np.add.at(votes, (np.arange(len(pool_y))[:, None], np.asarray(private_y)[idx]), 1)
    return float(np.mean(votes.argmax(axis=1) == pool_y))
