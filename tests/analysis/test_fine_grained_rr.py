"""Randomized response at the source for fine-grained PATE (`[fine_grained] label_noise =
"randomized-response"`, `analysis.mechanisms.fine_grained.randomized_response`): the exact sampler
against k-ary RR's law (a chi-square test passes at the right ε and fails at a wrong one), the
label-DP ratio by brute force over every pair of labels, the debiasing unbiased by Monte Carlo and
moving no label, the config's checks, and a release that records the label ε beside an unchanged
central cost."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import fine_grained as fg
from conftest import TINY


def rr_law(label: int, classes: int, eps: float) -> np.ndarray:
    """k-ary randomized response: the true label with e^ε/(e^ε + C − 1), each other with 1/(e^ε + C − 1)."""
    law = np.full(classes, 1.0 / (math.exp(eps) + classes - 1))
    law[label] = math.exp(eps) / (math.exp(eps) + classes - 1)
    return law


@pytest.mark.parametrize("eps,classes", [(0.5, 10), (2.0, 4), (4.0, 3)])
def test_the_exact_sampler_follows_k_ary_rr(eps, classes):
    draws = 120_000
    out = fg.randomized_response(np.full(draws, 1), classes, eps, NoiseSource(31))
    seen = np.bincount(out, minlength=classes)
    assert stats.chisquare(seen, draws * rr_law(1, classes, eps)).pvalue > 1e-3
    assert stats.chisquare(seen, draws * rr_law(1, classes, 1.3 * eps)).pvalue < 1e-6
    assert fg.rr_keep_probability(classes, eps) == pytest.approx(rr_law(0, classes, eps)[0], rel=1e-12)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_each_label_is_eps_label_dp_by_brute_force(eps):
    """Over every pair of labels and every output: the probability ratio is at most e^ε, and
    reaches it (the claim is tight)."""
    classes = 5
    worst = max(abs(math.log(rr_law(y, classes, eps)[o] / rr_law(z, classes, eps)[o]))
                for y in range(classes) for z in range(classes) for o in range(classes))
    assert worst == pytest.approx(eps, rel=1e-12)


def test_debiasing_is_unbiased_and_moves_no_label():
    """Monte Carlo: the debiased counts of 600 randomised histograms average to the true counts;
    a smoothed row of them is an increasing affine image of the randomised one (the same label)."""
    rng = np.random.default_rng(4)
    classes, eps = 4, 1.0
    labels = rng.integers(0, classes, 300)
    points = rng.integers(0, 6, 300)
    true = np.zeros((6, classes))
    np.add.at(true, (points, labels), 1)
    source, total = NoiseSource(32), np.zeros_like(true)
    p = fg.rr_keep_probability(classes, eps)
    for _ in range(600):
        noisy = np.zeros_like(true)
        np.add.at(noisy, (points, fg.randomized_response(labels, classes, eps, source)), 1)
        debiased = fg.debias(noisy, classes, eps)
        # a smoothed row (any weights) of the debiased counts is one shift and one positive scale of
        # the randomised counts' row: the same order of the classes, so the same label (ties alike)
        weights = rng.integers(1, 5, 6)
        scale = (weights @ debiased - (weights @ debiased)[0]) / (weights @ noisy - (weights @ noisy)[0] + 1e-300)
        moved = weights @ noisy != (weights @ noisy)[0]
        np.testing.assert_allclose(scale[moved], 1 / (p - (1 - p) / (classes - 1)), rtol=1e-9)
        total += debiased
    np.testing.assert_allclose(total / 600, true, atol=2.0)  # each mean's standard error is below 0.45
    margins = np.array([3.0, 7.0])
    np.testing.assert_allclose(fg.debias_margins(margins, classes, eps), margins / (p - (1 - p) / (classes - 1)))


def test_bad_labels_and_eps_are_refused():
    with pytest.raises(PateError, match=r"\[0, 3\)"):
        fg.randomized_response([0, 3], 3, 1.0, NoiseSource(1))
    with pytest.raises(PateError, match="positive"):
        fg.randomized_response([0, 1], 3, float("inf"), NoiseSource(1))


def test_the_config_asks_for_label_eps_with_randomized_response_only():
    from pate.config import load_config

    with pytest.raises(PateError, match="label_eps"):
        load_config(TINY, {"fine_grained.label_noise": "randomized-response"})
    with pytest.raises(PateError, match="label_eps"):
        load_config(TINY, {"fine_grained.label_eps": 2.0})
    ok = load_config(TINY, {"fine_grained.label_noise": "randomized-response", "fine_grained.label_eps": 2.0})
    assert ok.fine_grained.label_eps == 2.0


def test_a_label_eps_too_small_to_carry_a_label_is_refused_where_it_enters():
    """label_eps = 1e-300 was accepted: p - q rounded to 0, the debiasing divided by zero (a
    RuntimeWarning) and the run released with exit 0 (issue 52). The config refuses it in one
    line; the debiasing scale is computed by expm1, finite for every eps the config takes."""
    import warnings

    from pate.config import load_config

    rr = {"fine_grained.label_noise": "randomized-response"}
    for tiny in (1e-300, 5e-7):
        with pytest.raises(PateError, match=r"fine_grained.label_eps must be at least 1e-06"):
            load_config(TINY, {**rr, "fine_grained.label_eps": tiny})
    assert load_config(TINY, {**rr, "fine_grained.label_eps": 1e-6}).fine_grained.label_eps == 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for eps in (1e-300, 1e-6, 1.0, 50.0):
            p = fg.rr_keep_probability(10, eps)
            margins = fg.debias_margins(np.array([1.0]), 10, eps)
            assert np.isfinite(margins).all() and np.isfinite(fg.debias(np.array([[3.0, 1.0]]), 2, eps)).all()
            if eps >= 1e-6:  # the plain difference, where it has digits to spare
                assert margins[0] == pytest.approx(1.0 / (p - (1 - p) / 9), rel=1e-6)


def test_a_release_with_randomized_labels_records_its_label_eps_and_keeps_its_central_cost():
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.release import fine_grained_release as release_mod

    base = {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 16}
    plain = load_config(TINY, base)
    randomised = load_config(TINY, {**base, "fine_grained.label_noise": "randomized-response",
                                    "fine_grained.label_eps": 1.0})
    splits = split(load_dataset(plain.data), plain.data.public_size)
    made = release_mod.release(randomised, splits, NoiseSource(33), echo=lambda *_: None)
    reference = release_mod.release(plain, splits, NoiseSource(33), echo=lambda *_: None)
    assert made.noise == reference.noise and made.eps == reference.eps  # the central guarantee is unchanged
    assert str(made.arrays["label_noise"]) == "randomized-response" and float(made.arrays["label_eps"]) == 1.0
    rows = {i.key: i for i in release_mod.report(made.arrays, 1e-5).items}
    assert rows["label_eps"].value == 1.0 and rows["label_eps"].public
    assert "label_eps" not in {i.key for i in release_mod.report(reference.arrays, 1e-5).items}
