"""Vote histograms of a simulated ensemble: a public model of teacher agreement, fixed
before any vote is seen and fitted to none. Release settings chosen on such votes are
chosen without private values (`analysis.planning.headline_target`, `bench/release_noise.py
--simulate`): the simulated votes stand in for the real ones, which no release parameter
may depend on.

The model (round a-priori values, the defaults of `VoteModel`): per query a true class
(uniform), one confusable class (uniform among the others), and a chance ``a`` that a
teacher is right drawn from Beta(accuracy · concentration, (1 − accuracy) · concentration)
(easy and hard queries); a wrong teacher picks the confusable class with probability
``confusion``, else one of the other classes uniformly. Votes ~ Multinomial(teachers). With
two classes the confusable class is the only other one: a wrong teacher always picks it
(``confusion`` has nothing to split), so binary tasks are simulated as many-class ones are.

With a student that the teachers check (Interactive-GNMax, `analysis.bounds.interactive`): its
check offsets on the queries are public (`StudentModel.offsets`, ⌊T·p⌋ of the real student
on the real pool points, in query order), and so is how often a student of that confidence
is right (`StudentModel.calibration`, measured on the public evaluation split). Query i's
student names the true class with the calibrated chance of its confidence max_j o_ij / T,
else a uniformly chosen other class; its offset row is permuted so that its largest entry
lies on the class it names, the others on the remaining classes in a random order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.core.errors import PateError

__all__ = ["StudentModel", "VoteModel", "simulate_votes", "student_proposals"]


def simulate_votes(rng: np.random.Generator, queries: int, teachers: int, classes: int, accuracy: float,
                   concentration: float, confusion: float) -> tuple[np.ndarray, np.ndarray]:
    """``(votes, truth)``: ``(queries, classes)`` vote histograms of the model in the module
    docstring, each row summing to ``teachers``, and the true class of each query."""
    truth = rng.integers(classes, size=queries)
    confuser = (truth + rng.integers(1, classes, size=queries)) % classes
    a = rng.beta(accuracy * concentration, (1 - accuracy) * concentration, size=queries)
    if classes == 2:  # no other class to share a wrong vote with: the confusable class takes it all
        confusion = 1.0
    probs = np.repeat(((1 - a) * (1 - confusion) / max(classes - 2, 1))[:, None], classes, axis=1)
    rows = np.arange(queries)
    probs[rows, truth] = a
    probs[rows, confuser] = (1 - a) * confusion
    votes = np.stack([rng.multinomial(teachers, p / p.sum()) for p in probs])
    return votes, truth


@dataclasses.dataclass(frozen=True)
class StudentModel:
    """A public model of the student the teachers check (module docstring): its check
    ``offsets`` (queries × classes, whole numbers, each row summing to at most the teachers)
    and ``calibration``, the chance that it is right at confidence c in bin
    ⌊c · len(calibration)⌋ (the last bin includes c = 1)."""

    offsets: np.ndarray
    calibration: tuple[float, ...]

    def __post_init__(self):
        o = np.asarray(self.offsets)
        if o.ndim != 2 or not np.issubdtype(o.dtype, np.integer) or np.any(o < 0):
            raise PateError("the student's check offsets must be a (queries, classes) array of whole numbers >= 0")
        cal = tuple(float(c) for c in self.calibration)
        if not cal or not all(0.0 <= c <= 1.0 for c in cal):
            raise PateError(f"the student's calibration must be chances in [0, 1], got {self.calibration}")
        object.__setattr__(self, "calibration", cal)

    def right(self, offsets: np.ndarray, teachers: int) -> np.ndarray:
        """The calibrated chance that the student of each offset row is right."""
        bins = len(self.calibration)
        k = np.minimum((np.asarray(offsets).max(axis=-1) * bins) // int(teachers), bins - 1)
        return np.asarray(self.calibration)[k]


def student_proposals(rng: np.random.Generator, student: StudentModel, truth: np.ndarray, teachers: int,
                      classes: int) -> np.ndarray:
    """The simulated student's check offsets on queries of true class ``truth`` (module docstring)."""
    o = np.asarray(student.offsets, dtype=np.int64)[: truth.size]
    if o.shape != (truth.size, classes):
        raise PateError(f"the student's check offsets cover {o.shape[0]} queries of {o.shape[-1]} classes; "
                        f"{truth.size} of {classes} were simulated")
    right = rng.random(truth.size) < student.right(o, teachers)
    named = np.where(right, truth, (truth + rng.integers(1, classes, size=truth.size)) % classes)
    srt = -np.sort(-o, axis=1)  # largest first
    rest = np.argsort(rng.random((truth.size, classes)) + (np.arange(classes)[None, :] == named[:, None]), axis=1)
    order = np.concatenate([named[:, None], rest[:, : classes - 1]], axis=1)  # named class first, then shuffled
    out = np.empty_like(o)
    np.put_along_axis(out, order, srt, axis=1)
    return out


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
        if int(self.teachers) < 1 or int(self.classes) < 2:
            raise PateError(f"a simulated ensemble needs at least 1 teacher and 2 classes, got "
                            f"{self.teachers} teachers and {self.classes} classes")
        if not (0 < self.accuracy < 1 and self.concentration > 0 and 0 <= self.confusion <= 1):
            raise PateError(f"the vote model needs 0 < accuracy < 1, concentration > 0 and 0 <= confusion <= 1, "
                            f"got {self.accuracy}, {self.concentration}, {self.confusion}")

    def draw(self, seed: int, queries: int) -> np.ndarray:
        """The vote histogram of ``queries`` queries of the simulated ensemble ``seed``."""
        return self.draw_with_truth(seed, queries)[0]

    def draw_with_truth(self, seed: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
        """``(votes, truth)`` of `draw`: the same votes and each query's simulated true class."""
        return simulate_votes(np.random.default_rng(seed), int(queries), int(self.teachers), int(self.classes),
                              self.accuracy, self.concentration, self.confusion)

    def draw_checked(self, seed: int, queries: int, student: StudentModel) -> tuple[np.ndarray, np.ndarray]:
        """``(votes, offsets)`` of ``queries`` queries of ensemble ``seed`` and the simulated
        student that they check (`student_proposals`)."""
        rng = np.random.default_rng(seed)
        votes, truth = simulate_votes(rng, int(queries), int(self.teachers), int(self.classes), self.accuracy,
                                      self.concentration, self.confusion)
        return votes, student_proposals(rng, student, truth, int(self.teachers), int(self.classes))
