"""What a teachers' release is expected to buy, stated before any vote: the answered queries
and the label accuracy of a mechanism on votes simulated from the public vote model
(`analysis.planning.simulated_votes.VoteModel`, the model the target planner uses), and
whether those labels are expected to be near chance.

The mechanism's own sampler (`analysis.mechanisms.record.Mechanism.sample`: float64 noise or
exact coins, as the record says) runs on ``draws`` simulated ensembles of the release's shape
(public seeds ``seed, seed + 1, …``; each ensemble its own noise, drawn from a seeded
`analysis.core.noise.NoiseSource` on a stream no release uses). Per draw: how many queries are
answered (Confident-GNMax's threshold step, and ``max_answers`` when a budget caps them) and
the share of the answered labels that are the simulated true class; the outcome is the mean
over draws, its spread the standard deviation between draws. The same votes give the
noiseless plurality's accuracy, the best the labels could be under that model.

**Near chance.** Chance is 1/C for C classes. A release is near chance when its expected label
accuracy is below the midpoint between chance and the noiseless plurality on the same
simulated votes,

    floor = 1/C + NEAR_CHANCE_SHARE · (plurality − 1/C),     NEAR_CHANCE_SHARE = 1/2,

i.e. when the noise is expected to take more than half of what the ensemble knows beyond
guessing (labels nearer to a coin than to the teachers' own answer), or when it is expected to
answer no query at all. Why the plurality and not the model's mean teacher accuracy: the
plurality is what these labels become as the noise vanishes, so the floor compares the
release with itself without noise, whatever the number of teachers; why one half: the
examples that prompted it sit far from it on either side (20 teachers at LNMax γ 0.05 on 10
classes: expected 0.22 ± 0.05 against a floor of 0.48; a real run gave 0.14; the shipped configs
and the tests' tiny one: within a few points of the plurality, 0.61 against 0.53 for the tiny
one's 6 teachers at γ 0.5), so the choice is a midpoint, not a tuned value. Public: every input is the
config's or the model's, no vote of the data set enters, so the outcome may be printed and
published.

What holds: the figures are expectations *under the public model*; real teachers that agree
less than the model's ``accuracy`` give fewer answers and worse labels (docs/privacy.md, "A
target that holds"). The privacy guarantee does not depend on them.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms.record import UNANSWERED
from analysis.planning.simulated_votes import VoteModel

DRAWS = 8  # simulated ensembles, each with its own noise
SEED = 0  # the first ensemble's public seed (the target planner's first ensembles too)
#: The noise stream of the simulation: apart from every release's (`analysis.core.noise`'s
#: streams are small integers), so a research seed never makes a simulated draw a release's.
STREAM = 1 << 20
MAX_SIMULATED = 2000  # queries per simulated ensemble: more only narrows the spread
NEAR_CHANCE_SHARE = 0.5  # the share of the plurality's advantage over chance the labels must keep


@dataclasses.dataclass(frozen=True)
class ExpectedOutcome:
    """The expected outcome of ``queries`` queries of ``mechanism`` on ``model``'s simulated votes
    (module docstring). ``answered``, ``accuracy``: means over the ``draws``; ``*_spread``: their
    standard deviations between draws (on ``simulated`` queries a draw); ``plurality``: the
    noiseless plurality's accuracy on the same votes. ``accuracy`` is NaN when no draw answered."""

    mechanism: str
    queries: int
    model: VoteModel
    draws: int
    seed: int
    simulated: int
    answered: float
    answered_spread: float
    accuracy: float
    accuracy_spread: float
    plurality: float

    @property
    def chance(self) -> float:
        return 1.0 / int(self.model.classes)

    @property
    def floor(self) -> float:
        """The label accuracy below which the release is near chance (module docstring)."""
        return self.chance + NEAR_CHANCE_SHARE * max(self.plurality - self.chance, 0.0)

    @property
    def near_chance(self) -> bool:
        """Whether the labels are expected to be near chance, or no query answered."""
        return self.answered < 1.0 or not (self.accuracy >= self.floor)

    def render(self) -> str:
        """One line for the terminal (`verdict` says why when it is near chance)."""
        acc = "none answered" if math.isnan(self.accuracy) else f"{self.accuracy:.2f} ± {self.accuracy_spread:.2f}"
        return (f"expected outcome: {self.answered:.0f} ± {self.answered_spread:.0f} of {self.queries} queries "
                f"answered, label accuracy {acc} (chance {self.chance:.2f}, noiseless plurality "
                f"{self.plurality:.2f}; {self.source()})")

    def source(self) -> str:
        """Where the figures come from: the mechanism and the public model."""
        m = self.model
        return (f"{self.mechanism} on simulated public votes of {m.teachers} teachers, {m.classes} classes, "
                f"teacher accuracy {m.accuracy:g}, {self.draws} draws")

    def verdict(self) -> str:
        """Why the release is near chance, in plain words (empty when it is not)."""
        if not self.near_chance:
            return ""
        if self.answered < 1.0:
            return f"near chance: the release is expected to answer no query ({self.answered:.2f} of {self.queries})"
        return (f"near chance: expected label accuracy {self.accuracy:.2f} ± {self.accuracy_spread:.2f} is below "
                f"{self.floor:.2f}, halfway from chance ({self.chance:.2f}) to the noiseless plurality "
                f"({self.plurality:.2f})")

    def refusal(self, override: str) -> str:
        """The one-line refusal of a near-chance release, with its figures, naming ``override``."""
        return (f"{self.verdict()} ({self.source()}): the release would spend eps on labels that buy (almost) "
                f"nothing; use less noise (`pate plan`), more teachers or fine-grained PATE, or {override} to "
                "release anyway")

    def warning(self) -> str:
        """The public line release.json's ``warnings`` carries when a user released anyway."""
        return (f"released although the plan expected it near chance: {self.verdict().removeprefix('near chance: ')} "
                f"({self.source()})")

    def meta(self) -> dict:
        """Its public values, for a labels.npz's meta."""
        out = dataclasses.asdict(self)
        out["model"] = dataclasses.asdict(self.model)
        return out

    @classmethod
    def from_meta(cls, meta: dict) -> "ExpectedOutcome":
        try:
            values = {f.name: meta[f.name] for f in dataclasses.fields(cls)}
            values["model"] = VoteModel(**values["model"])
            return cls(**values)
        except (KeyError, TypeError, ValueError) as err:
            raise PateError(f"a recorded expected outcome is damaged ({err})") from None


def expected_outcome(record, queries: int, model: VoteModel, *, max_answers: int | None = None,
                     draws: int = DRAWS, seed: int = SEED, simulated: int = MAX_SIMULATED) -> ExpectedOutcome:
    """The expected outcome of ``queries`` queries of ``record`` (an `analysis.mechanisms.registry`
    record that answers teacher votes) on ``model``'s simulated votes: ``draws`` ensembles of
    ``min(queries, simulated)`` queries, each answered by the record's own sampler with noise of
    public seed ``seed + i``. ``max_answers`` caps the answers as a budget plan does (the first
    ones kept). Public inputs only.

    Raises:
      PateError: a record that does not answer teacher votes, or bad counts.
    """
    if not record.needs_teachers:
        raise PateError(f"{record.name} does not answer teacher votes: it has no expected outcome on simulated votes")
    queries, draws = int(queries), int(draws)
    if queries < 1 or draws < 2:
        raise PateError(f"an expected outcome needs at least 1 query and 2 draws, got {queries} and {draws}")
    n = min(queries, int(simulated))
    answered, accuracy, plurality = [], [], []
    for i in range(draws):
        votes, truth = model.draw_with_truth(seed + i, n)
        labels = np.asarray(record.sample(votes, NoiseSource(seed + i, STREAM)))
        got = labels != UNANSWERED
        share = got.mean()  # answered share of these n queries; the release's count scales it
        count = share * queries if max_answers is None else min(share * queries, int(max_answers))
        if max_answers is not None and got.sum() > max_answers:  # answers past the cap are withheld
            got &= np.cumsum(got) <= int(max_answers)
        answered.append(count)
        accuracy.append(float(np.mean(labels[got] == truth[got])) if got.any() else math.nan)
        plurality.append(float(np.mean(_plurality(votes) == truth)))
    acc = np.asarray(accuracy)
    seen = acc[~np.isnan(acc)]
    return ExpectedOutcome(
        mechanism=record.name, queries=queries, model=model, draws=draws, seed=int(seed), simulated=n,
        answered=float(np.mean(answered)), answered_spread=float(np.std(answered, ddof=1)),
        accuracy=float(np.mean(seen)) if seen.size else math.nan,
        accuracy_spread=float(np.std(seen, ddof=1)) if seen.size > 1 else math.nan,
        plurality=float(np.mean(plurality)))


def _plurality(votes: np.ndarray) -> np.ndarray:
    """The noiseless plurality of each row, ties to a uniformly random top class (public seed)."""
    rng = np.random.default_rng(0)
    top = votes == votes.max(axis=1, keepdims=True)
    return np.argmax(top * rng.random(votes.shape), axis=1)
