"""Vote histograms of a simulated ensemble: a public model of teacher agreement, fixed
before any vote is seen and fitted to none. Release settings chosen on such votes are
chosen without private values (`analysis.headline_target`, `bench/release_noise.py
--simulate`): the simulated votes stand in for the real ones, which no release parameter
may depend on.

The model (round a-priori values, the defaults of `VoteModel`): per query a true class
(uniform), one confusable class (uniform among the others), and a chance ``a`` that a
teacher is right drawn from Beta(accuracy · concentration, (1 − accuracy) · concentration)
(easy and hard queries); a wrong teacher picks the confusable class with probability
``confusion``, else one of the other classes uniformly. Votes ~ Multinomial(teachers).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.errors import PateError

__all__ = ["VoteModel", "simulate_votes"]


def simulate_votes(rng: np.random.Generator, queries: int, teachers: int, classes: int, accuracy: float,
                   concentration: float, confusion: float) -> tuple[np.ndarray, np.ndarray]:
    """``(votes, truth)``: ``(queries, classes)`` vote histograms of the model in the module
    docstring, each row summing to ``teachers``, and the true class of each query."""
    truth = rng.integers(classes, size=queries)
    confuser = (truth + rng.integers(1, classes, size=queries)) % classes
    a = rng.beta(accuracy * concentration, (1 - accuracy) * concentration, size=queries)
    probs = np.repeat(((1 - a) * (1 - confusion) / (classes - 2))[:, None], classes, axis=1)
    rows = np.arange(queries)
    probs[rows, truth] = a
    probs[rows, confuser] = (1 - a) * confusion
    votes = np.stack([rng.multinomial(teachers, p / p.sum()) for p in probs])
    return votes, truth


@dataclasses.dataclass(frozen=True)
class VoteModel:
    """The public model's parameters (module docstring): the ensemble's shape (``teachers``,
    ``classes``, from the config) and the a-priori agreement (``accuracy``,
    ``concentration``, ``confusion``)."""

    teachers: int
    classes: int
    accuracy: float = 0.7
    concentration: float = 2.0
    confusion: float = 0.5

    def __post_init__(self):
        if int(self.teachers) < 1 or int(self.classes) < 3:
            raise PateError(f"a simulated ensemble needs at least 1 teacher and 3 classes, got "
                            f"{self.teachers} teachers and {self.classes} classes")
        if not (0 < self.accuracy < 1 and self.concentration > 0 and 0 <= self.confusion <= 1):
            raise PateError(f"the vote model needs 0 < accuracy < 1, concentration > 0 and 0 <= confusion <= 1, "
                            f"got {self.accuracy}, {self.concentration}, {self.confusion}")

    def draw(self, seed: int, queries: int) -> np.ndarray:
        """The vote histogram of ``queries`` queries of the simulated ensemble ``seed``."""
        return simulate_votes(np.random.default_rng(seed), int(queries), int(self.teachers), int(self.classes),
                              self.accuracy, self.concentration, self.confusion)[0]
