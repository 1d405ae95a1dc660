"""Synthetic data: one random prototype image per class plus Gaussian noise, generated whole from
the `[data]` section's ``synthetic_*`` keys (the tests' and benchmarks' data set). Nobody's data:
its "private" rows are drawn whole whenever any are asked for, and its ledger is named by the
parameters that generate it."""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from pate.data.format import DataFormat, DataSection
from pate.data.rows import check_rows
from pate.data.splits import Dataset, PublicPool, split


def synthetic(train_size: int, test_size: int, shape: tuple[int, ...] = (8, 8, 1),
              num_classes: int = 10, noise: float = 0.3, seed: int = 0) -> Dataset:
    """A learnable synthetic data set: one random prototype image per class plus noise.

    Each image is `clip(prototype[label] + noise * N(0, 1), 0, 1)` with uniform labels;
    small noise makes the classes separable, large noise makes them overlap.
    """
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0.0, 1.0, size=(num_classes, *shape)).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, num_classes, size=n).astype(np.int32)
        x = prototypes[y] + noise * rng.standard_normal((n, *shape)).astype(np.float32)
        return np.clip(x, 0.0, 1.0).astype(np.float32), y

    x_train, y_train = draw(train_size)
    x_test, y_test = draw(test_size)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, num_classes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyntheticFormat(DataFormat):
    """Generated from the section's ``synthetic_*`` keys: no file, everything known up front."""

    def classes(self, section: DataSection) -> int:
        return int(section.synthetic_classes)

    def input_shape(self, section: DataSection) -> tuple[int, ...]:
        return tuple(int(d) for d in section.synthetic_shape)

    def load(self, section: DataSection) -> Dataset:
        return synthetic(section.synthetic_train_size, section.synthetic_test_size, tuple(section.synthetic_shape),
                         section.synthetic_classes, section.synthetic_noise, section.synthetic_seed)

    def public(self, section: DataSection) -> PublicPool:
        full = self.load(section)
        return PublicPool(full.name, full.x_test, full.y_test, full.num_classes, int(full.x_train.shape[0]))

    def pool_inputs(self, section: DataSection, public_size: int) -> np.ndarray:
        """Drawn whole: its test points follow its train points in one random stream."""
        return split(self.load(section), public_size).pool_x

    def with_train(self, section: DataSection, x_train: np.ndarray, y_train: np.ndarray) -> Dataset:
        return dataclasses.replace(self.load(section), x_train=x_train, y_train=y_train)

    def train_count(self, section: DataSection) -> int:
        return int(section.synthetic_train_size)

    def train_rows(self, section: DataSection, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        full = self.load(section)
        check_rows(wanted, full.x_train.shape[0], "the synthetic train split")
        return full.x_train[wanted], full.y_train[wanted]

    def train_chunks(self, section: DataSection, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        full = self.load(section)
        for first in range(0, full.x_train.shape[0], chunk):
            yield full.x_train[first:first + chunk], full.y_train[first:first + chunk]

    def legacy_identity(self, section: DataSection) -> str:
        """Its generating parameters: it has no files."""
        return (f"synthetic(train={section.synthetic_train_size}, shape={list(section.synthetic_shape)}, "
                f"classes={section.synthetic_classes}, noise={section.synthetic_noise:g}, "
                f"seed={section.synthetic_seed})")


SYNTHETIC = SyntheticFormat(
    name="synthetic", summary="generated: a random prototype image per class plus noise (the synthetic_* keys)",
    path_names="nothing (it is generated)")
