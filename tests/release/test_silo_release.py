"""pate.release.silo_release: the silos' shares summed through Flower's SecAgg+ (its real workflow
and mod, in process) and decoded have the central sampler's law (chi-square against the discrete
Laplace pmf and against `fine_grained.release`'s own draws, failing at a wrong scale); the silos'
histograms add up to the central release's; the plan is public and agreed, a silo refuses another
one, and a silo named twice or a share short is refused. The shares' own arithmetic:
tests/analysis/test_silos.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("flwr")

from scipy import stats

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource, discrete_laplace_pmf
from analysis.core.shares import laplace_share
from analysis.mechanisms import fine_grained
from analysis.mechanisms import silos as silos_mod
from pate.config import load_config
from pate.data import load_dataset, load_public, split, split_rows
from pate.programs import secure_sum
from pate.programs.cluster import block
from pate.programs.data_facts import with_data_defaults
from pate.programs.flower_loopback import loopback_grid, server_context
from pate.release import fine_grained_release as fine_release
from pate.release import silo_release

from conftest import TINY, chi_square_pvalue

SETTINGS = {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 8, "features.map": "pixels"}


def _config(**more):
    return with_data_defaults(load_config(TINY, {**SETTINGS, **more}))


def test_the_shares_summed_by_secagg_and_decoded_have_the_central_samplers_law():
    silos, cells = 3, 30_000
    noise = fine_grained.laplace_noise(1.0, votes=1)  # scale 2
    rng = np.random.default_rng(54)
    counts = [rng.integers(0, 4, cells) for _ in range(silos)]  # each silo's own histogram
    modulus = silos_mod.wrap_free_modulus(4 * silos, noise, silos, cells, failure=1e-9)
    ranges = secure_sum.SecAggRanges.for_modulus(modulus.modulus, silos)
    source = NoiseSource(seed=541)
    inputs = [np.mod(h + laplace_share(source, noise.parameter, silos, cells), modulus.modulus) for h in counts]

    def contribute(context, config):
        i = int(context.node_config["silo"])
        return inputs[i], ranges, i

    grid = loopback_grid(secure_sum.client_app(contribute), [{"silo": i} for i in range(silos)])
    total = secure_sum.secure_sum(grid, server_context(), nodes=[1, 2, 3], ranges=ranges, needed=silos,
                                  timeout=5.0, fit_config={})
    summed_noise = silos_mod.decode(total.residues, modulus) - sum(counts)
    central = fine_grained.release(np.zeros((cells // 2, 2), np.int64), noise, NoiseSource(seed=542)).ravel()
    support = np.arange(-25, 26)
    assert chi_square_pvalue(summed_noise, lambda y: discrete_laplace_pmf(y, 2.0), support) > 1e-3
    assert chi_square_pvalue(summed_noise, lambda y: discrete_laplace_pmf(y, 2.5), support) < 1e-4  # can fail
    assert chi_square_pvalue(summed_noise, lambda y: discrete_laplace_pmf(y, 1.6), support) < 1e-4
    table = np.stack([np.bincount(np.clip(x, -12, 12) + 12, minlength=25) for x in (summed_noise, central)])
    assert stats.chi2_contingency(table).pvalue > 1e-3  # the central sampler's own draws: one law
    shifted = np.stack([np.bincount(np.clip(x, -12, 12) + 12, minlength=25) for x in (summed_noise + 1, central)])
    assert stats.chi2_contingency(shifted).pvalue < 1e-4


def test_the_silos_histograms_add_up_to_the_central_releases(monkeypatch):
    """Each silo's input less its share is the count of its own slice (the central counting), and
    the slices' inputs add up to the histogram of every record, mod M."""
    config = _config()
    pool = load_public(config.data)
    plan = silo_release.plan_of(config, pool)
    monkeypatch.setattr(silo_release, "laplace_share", lambda source, scale, parts, shape: np.zeros(shape, np.int64))
    total = pool.train_size
    inputs = []
    for i in range(plan.silos):
        rows = block(total, plan.silos, i)
        splits = split_rows(config.data, config.data.public_size, np.arange(rows.start, rows.stop))
        inputs.append(silo_release.silo_input(config, plan, splits, rows.start, NoiseSource(seed=1), echo=lambda _: None))
    whole = split(load_dataset(config.data), config.data.public_size)
    side = fine_release.public_side(config, whole.pool_x, whole.num_classes, plan.noise, echo=lambda _: None)
    central = fine_release.slice_counts(side, config.fine_grained, whole.train_x, whole.train_y, 0, None)
    assert central.sum() == total and all(x.shape == central.shape for x in inputs)
    assert np.array_equal(np.mod(sum(inputs), plan.modulus.modulus), central)
    assert not np.array_equal(inputs[0], central)  # each silo holds a part


def test_the_plan_is_public_and_a_silo_refuses_another_one():
    config = _config()
    pool = load_public(config.data)
    plan = silo_release.plan_of(config, pool)
    assert plan.records == pool.train_size == 480 and plan.needed == plan.silos == 3
    assert plan.modulus.modulus == 480 + 2 * plan.modulus.reach + 1
    assert plan.ranges.modulus == plan.modulus.modulus and plan.digest() == silo_release.plan_of(config, pool).digest()
    silo_release.check_plan(plan, plan.digest(), 0)
    for other in ({"fine_grained.eps": 2.0}, {"silos.needed": 2}, {"silos.records": 1000},
                  {"fine_grained.votes_per_record": 2}, {"features.map": "none"}, {"data.public_size": 150}):
        theirs = _config(**other)
        digest = silo_release.plan_of(theirs, load_public(theirs.data)).digest()
        with pytest.raises(PateError) as err:
            silo_release.check_plan(plan, digest, 2)
        assert "\n" not in str(err.value) and str(err.value).startswith("silo 2:"), other
    assert silo_release.plan_of(_config(**{"silos.timeout": 5.0, "silos.ledger": "x"}), pool).digest() == plan.digest()


def test_refusals_before_any_silo_is_asked_and_after_the_sum():
    config = _config()
    pool = load_public(config.data)
    with pytest.raises(PateError, match='fine_grained.noise = "laplace"'):
        silo_release.plan_of(_config(**{"fine_grained.noise": "gaussian"}), pool)
    for auto in ({"fine_grained.votes_per_record": 0}, {"fine_grained.smoothing_weights": "auto"}):
        with pytest.raises(PateError, match="pate ceiling --tune"):
            silo_release.plan_of(_config(**auto), pool)
    with pytest.raises(PateError, match="modulus"):
        silo_release.plan_of(_config(**{"silos.records": 2**30, "fine_grained.eps": 0.01}), pool)
    plan = silo_release.plan_of(config, pool)
    splits = split(load_dataset(config.data), config.data.public_size)
    small = dataclasses.replace(plan, records=100)
    with pytest.raises(PateError, match="more than the 100"):
        silo_release.silo_input(config, small, splits, 0, NoiseSource(seed=1), echo=lambda _: None)
    side = fine_release.public_side(config, pool.pool_x, pool.num_classes, plan.noise, echo=lambda _: None)
    residues = np.zeros(plan.cells, np.int64)
    for named, present, needle in (((0, 1, 1), 3, "silo 1 answered twice"), ((0, 1, 5), 3, "outside 0..2"),
                                   ((0, 2), 2, "only 2 of the 3 noise shares")):
        with pytest.raises(PateError) as err:
            silo_release.release_total(side, config, plan, secure_sum.SecureSum(present, residues, named, ()))
        assert needle in str(err.value) and "\n" not in str(err.value)
    made = silo_release.release_total(side, config, plan, secure_sum.SecureSum(3, residues, (2, 0, 1), ()))
    assert made.arrays["labels"].shape == (pool.pool_x.shape[0],) and made.eps == 1.0
