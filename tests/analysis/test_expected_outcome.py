"""What a release is expected to buy (`analysis.planning.expected_outcome`): the expected answers
and label accuracy on simulated public votes hold, within the simulation's spread, for what each
mechanism's sampler then does on fresh votes of the same model (and not at another noise); 20
teachers at LNMax γ 0.05 are near chance while the shipped settings are not; binary tasks are
simulated and planned as many-class ones are."""

import math

import numpy as np
import pytest

from analysis.core.noise import NoiseSource
from analysis.mechanisms import registry
from analysis.mechanisms.record import UNANSWERED
from analysis.planning.expected_outcome import DRAWS, NEAR_CHANCE_SHARE, expected_outcome
from analysis.planning.simulated_votes import VoteModel

#: Noise for every teacher record of the registry, 50 teachers of 10 classes (each record takes its own).
NOISE = dict(gamma=0.1, sigma=8.0, threshold=35.0, sigma_threshold=8.0)
#: How many of the simulation's spreads a fresh release may lie from the expectation (a spread of
#: a mean of DRAWS draws and one fresh draw: sqrt(1 + 1/DRAWS) spreads; 4 of them, two-sided).
WIDTH = 4.0 * math.sqrt(1.0 + 1.0 / DRAWS)


def _released(record, model: VoteModel, seed: int, queries: int) -> tuple[float, float]:
    """(answered, accuracy) of one release of ``record`` on fresh votes of ``model``."""
    votes, truth = model.draw_with_truth(seed, queries)
    labels = np.asarray(record.sample(votes, NoiseSource(seed)))
    got = labels != UNANSWERED
    return float(got.sum()), float(np.mean(labels[got] == truth[got]))


@pytest.mark.parametrize("name", registry.TEACHER_NAMES)
def test_every_teacher_mechanism_does_what_its_expected_outcome_says(name):
    record = registry.from_noise(name, **NOISE)
    model = VoteModel(50, 10)
    expected = expected_outcome(record, 300, model)
    assert not expected.near_chance and expected.accuracy_spread > 0
    for seed in (1001, 1002, 1003):  # ensembles and noise the simulation never drew
        answered, accuracy = _released(record, model, seed, 300)
        assert abs(accuracy - expected.accuracy) <= WIDTH * expected.accuracy_spread, (seed, accuracy, expected)
        assert abs(answered - expected.answered) <= WIDTH * expected.answered_spread + 1e-9, (seed, answered)


def test_the_check_has_power_a_release_at_other_noise_lies_outside():
    """As a KS test at a wrong scale fails: a release at a fifth of γ is far outside the spread."""
    model = VoteModel(50, 10)
    expected = expected_outcome(registry.from_noise("lnmax", gamma=0.1), 300, model)
    _, accuracy = _released(registry.from_noise("lnmax", gamma=0.02), model, 1001, 300)
    assert abs(accuracy - expected.accuracy) > WIDTH * expected.accuracy_spread


@pytest.mark.parametrize("name, noise", [("lnmax", dict(gamma=0.05)), ("permute-and-flip", dict(gamma=0.05)),
                                         ("exponential", dict(gamma=0.05)), ("gnmax", dict(sigma=40.0)),
                                         ("gnmax-exact", dict(sigma=40.0))])
def test_twenty_teachers_at_the_default_noise_are_near_chance(name, noise):
    """The issue's case: noise scale 20 on 20 teachers of 10 classes released labels at chance."""
    outcome = expected_outcome(registry.from_noise(name, **noise), 100, VoteModel(20, 10))
    assert outcome.near_chance and outcome.accuracy < outcome.floor
    assert outcome.floor == pytest.approx(0.1 + NEAR_CHANCE_SHARE * (outcome.plurality - 0.1))
    assert "allow_near_chance" in outcome.refusal("set [aggregation] allow_near_chance = true")


@pytest.mark.parametrize("teachers, classes, name, noise, queries", [
    (500, 10, "confident-gnmax", dict(threshold=400.0, sigma_threshold=200.0, sigma=70.0), 1600),  # the shipped config
    (50, 10, "confident-gnmax", dict(threshold=40.0, sigma_threshold=30.0, sigma=10.0), 500),  # quickstart
    (6, 4, "lnmax", dict(gamma=0.5), 100),  # configs/tiny.toml
])
def test_the_shipped_settings_are_not_near_chance(teachers, classes, name, noise, queries):
    outcome = expected_outcome(registry.from_noise(name, **noise), queries, VoteModel(teachers, classes))
    assert not outcome.near_chance and outcome.verdict() == ""


def test_a_release_that_answers_nothing_is_near_chance():
    outcome = expected_outcome(registry.from_noise("confident-gnmax", threshold=49.0, sigma_threshold=0.5, sigma=5.0),
                               20, VoteModel(50, 10, accuracy=0.3))
    assert outcome.answered < 1 and outcome.near_chance and "answer no query" in outcome.verdict()


def test_the_outcome_is_public_and_reproducible():
    """Public seeds only: the same inputs give the same figures (no OS entropy, no vote)."""
    record = registry.from_noise("gnmax", sigma=8.0)
    a, b = (expected_outcome(record, 200, VoteModel(50, 10)) for _ in range(2))
    assert a == b
    assert type(a).from_meta(a.meta()) == a


def test_two_classes_are_simulated_a_wrong_teacher_picking_the_other_class():
    """The model's 3-class floor only guarded a division by C − 2: with two classes a wrong vote
    has one place to go. The truth's share of the votes has mean ``accuracy`` (the Beta's)."""
    model = VoteModel(200, 2, accuracy=0.7)
    votes, truth = model.draw_with_truth(0, 4000)
    assert votes.shape == (4000, 2) and np.all(votes.sum(axis=1) == 200)
    share = votes[np.arange(4000), truth] / 200
    assert share.mean() == pytest.approx(0.7, abs=0.015)
    outcome = expected_outcome(registry.from_noise("gnmax", sigma=20.0), 200, VoteModel(50, 2))
    assert outcome.chance == 0.5 and 0.5 < outcome.floor < outcome.plurality and not outcome.near_chance


def test_many_classes_votes_are_the_model_they_were():
    """Three classes or more: the same votes as before two classes were allowed (the same draws)."""
    model = VoteModel(30, 10)
    rng = np.random.default_rng(7)
    truth = rng.integers(10, size=5)
    confuser = (truth + rng.integers(1, 10, size=5)) % 10
    a = rng.beta(0.7 * 2.0, 0.3 * 2.0, size=5)
    probs = np.repeat(((1 - a) * 0.5 / 8)[:, None], 10, axis=1)
    probs[np.arange(5), truth] = a
    probs[np.arange(5), confuser] = (1 - a) * 0.5
    want = np.stack([rng.multinomial(30, p / p.sum()) for p in probs])
    assert np.array_equal(model.draw(7, 5), want)


def test_a_target_is_planned_for_two_classes():
    """The target-ε planner refused 2 classes; it plans them as it plans ten."""
    from analysis.planning.headline_target import choose_release

    record = registry.from_noise("confident-gnmax", threshold=35.0, sigma_threshold=8.0, sigma=8.0)
    choice = choose_release(record, 200, 20.0, 1e-5, model=VoteModel(50, 2), ensembles=2)
    assert 0 < choice.num_queries <= 200 and choice.probability >= 0.95
