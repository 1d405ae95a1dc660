"""The values every format's loaders return — a data set (`Dataset`), the benchmark's three splits
(`Splits`), the public pool alone (`PublicPool`) — and what is done to them whatever the format:
the benchmark split (`split`) and the teachers' disjoint shards (`partition`).

Inputs are float32 images in [0, 1] shaped (N, H, W, C), or float32 rows of features shaped (N, F)
(an .npz of embeddings: `is_embedding`); labels are int32.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.core.errors import PateError


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A labelled data set with a train and a test split."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


@dataclasses.dataclass(frozen=True)
class Splits:
    """The benchmark protocol: private train set, public pool, evaluation set.

    The pool is the first `public_size` test points (their labels are kept only to
    score the student); evaluation is the rest of the test split.
    """

    train_x: np.ndarray
    train_y: np.ndarray
    pool_x: np.ndarray
    pool_y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray
    num_classes: int


@dataclasses.dataclass(frozen=True)
class PublicPool:
    """The public pool of a `[data]` section and nothing private: its inputs and labels (the
    first `public_size` test points, as `split` cuts them), the number of classes, and the
    private train split's record count (`train_size`, read from a file header, never a record:
    under replace-one the count is public)."""

    name: str
    pool_x: np.ndarray
    pool_y: np.ndarray
    num_classes: int
    train_size: int


@dataclasses.dataclass(frozen=True)
class Partition:
    """Disjoint, equal teacher shards of the training set.

    `indices[t]` are the training-set rows of teacher t; `left_out` the rows in no
    shard (the remainder of `num_points / num_teachers`).
    """

    indices: np.ndarray  # (num_teachers, shard_size) int64
    left_out: np.ndarray  # (remainder,) int64

    @property
    def num_teachers(self) -> int:
        return int(self.indices.shape[0])

    @property
    def shard_size(self) -> int:
        return int(self.indices.shape[1])


def is_embedding(x: np.ndarray) -> bool:
    """Whether inputs `x` are rows of features (N, F) rather than images (N, H, W, C)."""
    return np.ndim(x) == 2


def float_images(x: np.ndarray) -> np.ndarray:
    """uint8 images (N, H, W[, C]) → float32 in [0, 1] shaped (N, H, W, C)."""
    x = np.asarray(x, dtype=np.float32) / 255.0
    return x[..., None] if x.ndim == 3 else x


def check_pool_size(name: str, public_size: int, n_test: int) -> None:
    """Refuses a pool that leaves no evaluation points in a test split of ``n_test``."""
    if public_size >= n_test:
        raise PateError(f"data.public_size = {public_size} leaves no evaluation points: the "
                        f"{name} test split has {n_test}; lower data.public_size")


def split(dataset: Dataset, public_size: int) -> Splits:
    """Splits per the benchmark protocol: pool = first `public_size` test points.

    Raises:
      PateError: the test split has no points left for evaluation.
    """
    check_pool_size(dataset.name, public_size, dataset.x_test.shape[0])
    return Splits(
        train_x=dataset.x_train, train_y=dataset.y_train,
        pool_x=dataset.x_test[:public_size], pool_y=dataset.y_test[:public_size],
        eval_x=dataset.x_test[public_size:], eval_y=dataset.y_test[public_size:],
        num_classes=dataset.num_classes)


def partition(num_points: int, num_teachers: int, seed: int) -> Partition:
    """Splits `range(num_points)` into `num_teachers` disjoint, equal shards.

    A seeded permutation is cut into shards of `num_points // num_teachers`; the
    remainder is left out (reported as `Partition.left_out`).

    Raises:
      PateError: more teachers than points.
    """
    if num_teachers > num_points:
        raise PateError(f"{num_teachers} teachers but only {num_points} training points: each "
                        "teacher needs at least one; lower teachers.num_teachers")
    shard = num_points // num_teachers
    order = np.random.default_rng(seed).permutation(num_points)
    return Partition(indices=order[: shard * num_teachers].reshape(num_teachers, shard),
                     left_out=np.sort(order[shard * num_teachers:]))
