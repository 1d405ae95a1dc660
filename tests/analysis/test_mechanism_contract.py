"""One contract, run over every record of `analysis.mechanisms.registry`: what a record says of
itself holds. Its arrays round-trip through labels.npz; its options build it; its sampler's law
matches a second implementation (a noisy max's law by numerical integration over the noise:
Laplace for LNMax, Gaussian for GNMax, exponential for permute-and-flip — Ding et al. 2021's
identity —, Gumbel for the exponential mechanism; the threshold step's by its normal CDF); the
ledger charges what the record claims; its dp-accounting event is read by dp-accounting and
never composes to less than the ledger's figure; it plans and reports. A new record joins by
being in `RECORDS` (and, if it needs teachers, in `EXAMPLES` with its noise)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate, stats

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import composition, events, registry
from analysis.mechanisms.fine_grained import FineGrained, Noise
from analysis.mechanisms.record import UNANSWERED
from analysis.planning import plan as plan_mod
from analysis.reporting.accountants import data_independent_items

#: A record of each kind, with noise where its answers are neither certain nor random.
EXAMPLES = {
    "lnmax": registry.from_options("lnmax", gamma=0.4),
    "gnmax": registry.from_options("gnmax", sigma=2.0),
    "confident-gnmax": registry.from_options("confident-gnmax", threshold=6.0, sigma_threshold=2.0, sigma=2.0),
    "gnmax-exact": registry.from_options("gnmax-exact", sigma=2.0),
    # σ = 3: at σ = 2 (ρ = 15 over 40 queries) dp-accounting's finer grid of orders converts the
    # zCDP event a hair below the ledger's grid (39.83 against 40.01), which the event test forbids
    "confident-gnmax-exact": registry.from_options("confident-gnmax-exact", threshold=6.0, sigma_threshold=3.0,
                                                   sigma=3.0),
    "permute-and-flip": registry.from_options("permute-and-flip", gamma=0.4),
    "exponential": registry.from_options("exponential", gamma=0.4),
    "fine-grained": FineGrained(Noise.laplace(Fraction(4), 2)),
}
TEACHERS = [name for name in registry.NAMES if registry.RECORDS[name].needs_teachers]


def test_every_record_has_an_example_and_says_what_it_can_do():
    assert set(EXAMPLES) == set(registry.NAMES)
    for name, record in EXAMPLES.items():
        assert record.name == name and registry.record_type(name) is type(record)
        for capability in ("needs_teachers", "exact", "sanitised", "threshold_step"):
            assert isinstance(getattr(record, capability), bool)
        assert record.summary and record.describe().startswith(name)
    assert registry.TEACHER_NAMES == tuple(TEACHERS)


@pytest.mark.parametrize("name", registry.NAMES)
def test_the_record_round_trips_through_labels_arrays(name):
    record = EXAMPLES[name]
    arrays = record.to_arrays()
    assert set(arrays) <= set(registry.ARRAY_KEYS)
    assert registry.from_arrays(arrays) == record
    broken = {k: v for k, v in arrays.items() if k != record.array_keys()[0]}
    with pytest.raises(PateError, match="labels.npz"):
        registry.from_arrays(broken)


@pytest.mark.parametrize("name", registry.NAMES)
def test_options_build_the_record_or_say_where_its_noise_comes_from(name):
    record = EXAMPLES[name]
    if not record.needs_teachers:
        with pytest.raises(PateError, match=r"\[fine_grained\]"):
            registry.from_options(name, gamma=0.4)
        return
    assert registry.from_options(name, **record.params()) == record
    stray = next(k for k in ("gamma", "sigma") if k not in record.option_names())
    with pytest.raises(PateError, match="do.*not apply"):
        registry.from_options(name, **record.params(), **{stray: 1.0})


def _noise_law(name, record):
    """(pdf, cdf) of the per-count noise of a noisy-max record."""
    if name == "lnmax":
        return stats.laplace(scale=1 / record.gamma).pdf, stats.laplace(scale=1 / record.gamma).cdf
    if name in ("gnmax", "confident-gnmax"):
        return stats.norm(scale=record.sigma).pdf, stats.norm(scale=record.sigma).cdf
    if name == "permute-and-flip":
        return stats.expon(scale=1 / record.gamma).pdf, stats.expon(scale=1 / record.gamma).cdf
    return stats.gumbel_r(scale=1 / record.gamma).pdf, stats.gumbel_r(scale=1 / record.gamma).cdf


def summed_law(record, counts) -> np.ndarray:
    """An exact-coin record's answer law by summation over its discrete Gaussian pmf (V the
    sampler's variance): P[j] = Σ_x p(x) Π_{i<j} P[X < n_j + x − n_i] Π_{i>j} P[X <= n_j + x − n_i]
    (ties to the lowest index), then the check (answer with P[Z >= ⌈T − max n⌉])."""
    from analysis.core.noise import discrete_gaussian_pmf

    reach = 200
    z = np.arange(-reach, reach + 1)
    pmf = discrete_gaussian_pmf(z, float(record.variance))
    cdf = np.cumsum(pmf)  # cdf[k + reach] = P[X <= k]

    def below_or_at(k):
        return 0.0 if k < -reach else 1.0 if k >= reach else cdf[k + reach]

    law = []
    for j, nj in enumerate(counts):
        total = 0.0
        for x, px in zip(z, pmf):
            prod = px
            for i, ni in enumerate(counts):
                if i != j:
                    prod *= below_or_at(nj + x - ni - (1 if i < j else 0))
            total += prod
        law.append(total)
    law = np.array(law)
    if record.threshold_step:
        pmf1 = discrete_gaussian_pmf(z, float(record.variance_threshold))
        answer = pmf1[z >= math.ceil(record.threshold - max(counts))].sum()
        law = np.append(answer * law, 1 - answer)
    return law


def integrated_law(name, record, counts) -> np.ndarray:
    """The record's answer law by numerical integration: P[j] = ∫ f(x) Π_{i≠j} F(n_j + x − n_i) dx,
    then the threshold step (answer with P[max n + N(0, σ₁²) ≥ T]) for a record that has one;
    an exact-coin Gaussian's by summation (:func:`summed_law`)."""
    if name.endswith("-exact"):
        return summed_law(record, counts)
    pdf, cdf = _noise_law(name, record)
    law = []
    for j, nj in enumerate(counts):
        def integrand(x, j=j, nj=nj):
            return pdf(x) * np.prod([cdf(nj + x - ni) for i, ni in enumerate(counts) if i != j])
        law.append(integrate.quad(integrand, -60 / min(1.0, getattr(record, "gamma", 1.0)), 200, limit=400,
                                  epsabs=1e-12)[0])
    law = np.array(law)
    if record.threshold_step:
        answer = stats.norm.sf((record.threshold - max(counts)) / record.sigma_threshold)
        law = np.append(answer * law, 1 - answer)
    return law


@pytest.mark.parametrize("name", TEACHERS)
def test_the_sampler_follows_the_records_law(name):
    """120,000 seeded answers to one histogram against the integrated law (chi-square); the test
    tells a record from the same mechanism at another noise."""
    record, counts, draws = EXAMPLES[name], [7, 5, 2, 0], 120_000
    labels = record.sample(np.tile(counts, (draws, 1)), NoiseSource(21))
    assert labels.dtype == np.int32
    assert set(np.unique(labels).tolist()) <= set(range(len(counts))) | ({UNANSWERED} if record.threshold_step else set())
    seen = np.bincount(np.where(labels == UNANSWERED, len(counts), labels), minlength=len(counts) + 1)
    law = integrated_law(name, record, counts)
    assert law.sum() == pytest.approx(1.0, abs=1e-6)
    if not record.threshold_step:
        seen = seen[:-1]
    assert stats.chisquare(seen, draws * law / law.sum()).pvalue > 1e-3
    other = type(record).from_options(**{k: v * 1.6 if k in ("gamma",) else v / 1.6 if k.startswith("sigma") else v
                                         for k, v in record.params().items()})
    wrong = integrated_law(name, other, counts)
    assert stats.chisquare(seen, draws * wrong / wrong.sum()).pvalue < 1e-6


@pytest.mark.parametrize("name", registry.NAMES)
def test_exact_records_add_no_sampling_delta_and_float_ones_do(name):
    record = EXAMPLES[name]
    assert (record.sampling_tv(1000, 10) == 0.0) == record.exact
    assert record.sampling_tv(1000, 10) < 1e-9


@pytest.mark.parametrize("name", registry.NAMES)
def test_the_ledger_charges_what_the_record_claims(name):
    """The ledger's ε of the record's cost (`composition.single_eps`) equals the record's own
    tightest data-independent claim, up to the PLD's discretisation; a release of one answer and
    of 40 answers alike (fine-grained: one release whatever it labels)."""
    record = EXAMPLES[name]
    for n in (1, 40):
        charged = composition.single_eps(record.cost(n), 1e-5)
        if record.needs_teachers:
            items = data_independent_items(record, n, 1e-5)
            claim = {i.key: i.value for i in items}["eps_data_independent_headline"]
        else:  # its pure ε; at δ > 0 the PLD may charge a hair less
            claim = record.independent_eps(n, 1e-5)
        assert charged <= claim * (1 + 1e-6) + 1e-9
        assert charged >= claim * 0.97, (charged, claim)


@pytest.mark.parametrize("name", registry.NAMES)
def test_the_dp_accounting_event_is_read_and_never_below_the_ledger(name):
    """dp-accounting's RDP accountant reads every record's event and composes it to at least the
    ledger's figure (its RDP curves are the ledger's or looser); the PLD accountant, where it
    reads the event (the Gaussians), reproduces the ledger's PLD route."""
    from dp_accounting import pld as dp_pld
    from dp_accounting import rdp as dp_rdp

    record, n, delta = EXAMPLES[name], 40, 1e-5
    cost = record.cost(n)
    event = record.dp_event(n)
    ours = composition.single_eps(cost, delta)
    can = events.supported(event)
    assert can["rdp"]
    theirs = dp_rdp.RdpAccountant().compose(event).get_epsilon(delta)
    assert theirs >= ours - 1e-6
    if can["pld"]:
        dist = composition.pld(cost)
        assert dist is not None
        got = dp_pld.PLDAccountant().compose(event).get_epsilon(delta)
        assert got == pytest.approx(float(dist.get_epsilon_for_delta(delta)), rel=2e-2)


@pytest.mark.parametrize("name", TEACHERS)
def test_the_record_plans_and_reports(name):
    """`plan` calibrates the record to a budget it then meets; a report of its answers has a
    public headline and keeps the data-dependent ε private."""
    from pate.release.privacy_report import report_of

    record = EXAMPLES[name]
    extra = {"threshold": 6.0} if record.threshold_step else {}
    made = plan_mod.plan(name, 50, 2.0, 1e-5, **extra)
    calibrated = registry.from_options(name, **made.noise)
    assert calibrated.independent_eps(50, 1e-5, max_answers=None).eps <= 2.0 + 1e-9
    votes = np.tile([30, 10, 5, 5], (20, 1))
    rep = report_of(record, votes, 1e-5, sanitize=False)
    public = {i.key: i.public for i in rep.items}
    assert public["eps_data_dependent"] is False
    assert all(public[k] for k in public if k.startswith("eps_data_independent"))
    if not record.sanitised:
        assert public["eps"] and rep.value("eps") == pytest.approx(record.independent_eps(20, 1e-5).eps)
