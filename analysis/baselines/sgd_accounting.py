"""Privacy accounting of DP-SGD: calibrate the noise multiplier for a target (eps, delta)
and recompute eps from what ran, with Google's `dp_accounting`.

The mechanism (Abadi et al., "Deep Learning with Differential Privacy", CCS 2016,
Algorithm 1): each of `steps` steps takes a Poisson sample of the private set (each
example independently with probability `q`), clips every example's gradient to L2 norm
`C`, sums them and adds N(0, (sigma C)^2) to each coordinate. One step is the
Poisson-subsampled Gaussian mechanism of noise multiplier `sigma` (sensitivity C under
add/remove-one neighbours); the run is its `steps`-fold adaptive composition:
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``.

Accountants:

- ``"rdp"`` (default): Renyi DP of the sampled Gaussian (Mironov, Talwar & Zhang,
  "Renyi Differential Privacy of the Sampled Gaussian Mechanism", 2019, Sec. 3.3),
  composed additively (Mironov 2017, Prop. 1) and converted to (eps, delta) with the
  improved conversion (Canonne, Kamath & Steinke 2020, Prop. 12; Asoodeh et al. 2020).
  Default because Tramer & Boneh (ICLR 2021), the DP-SGD figures this project compares
  with, report RDP eps: the same accountant makes the comparison like for like.
- ``"pld"``: privacy loss distributions (Koskela et al. 2020; Doroshenko et al.,
  "Connect the Dots", PETS 2022): tighter (a smaller eps for the same noise), so less
  noise at a given eps.
"""

from __future__ import annotations

import logging
import math

import dp_accounting
from dp_accounting import pld as dp_pld
from dp_accounting import rdp as dp_rdp

from analysis.core.errors import PateError
# dp_accounting logs through absl when its series for a fractional order fails to converge
# (large q); it drops that order, which can only make eps larger (safe): kept off the terminal.
from analysis.core.logs import quiet_absl

ACCOUNTANTS = ("rdp", "pld")

#: RDP orders searched: dp_accounting's defaults plus every integer order up to 256
#: (its defaults skip 64..127, where the best order of small-eps runs can lie).
RDP_ORDERS = tuple(sorted(set(dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS) | set(range(2, 257))))


def dp_event(noise_multiplier: float, sampling_rate: float, steps: int) -> dp_accounting.DpEvent:
    """`steps` Poisson-subsampled Gaussian steps: the DpEvent of a DP-SGD run."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)), int(steps))


def make_accountant(accountant: str) -> dp_accounting.PrivacyAccountant:
    """A fresh accountant (add/remove-one neighbouring relation)."""
    if accountant == "rdp":
        return dp_rdp.RdpAccountant(orders=RDP_ORDERS)
    if accountant == "pld":
        return dp_pld.PLDAccountant(value_discretization_interval=1e-3)
    raise PateError(f"unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANTS)}")


def epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
            accountant: str = "rdp") -> float:
    """eps at `delta` of a DP-SGD run (an upper bound: see the module docstring).

    Args:
      noise_multiplier: sigma, the noise std divided by the clip norm.
      sampling_rate: q, each example's probability of being in a step's batch.
      steps: number of noisy steps.
      delta: target delta, in (0, 1).
      accountant: "rdp" or "pld".
    """
    _check(sampling_rate, steps, delta)
    if noise_multiplier <= 0:
        return math.inf
    acc = make_accountant(accountant)
    with quiet_absl(logging.ERROR):
        acc.compose(dp_event(noise_multiplier, sampling_rate, steps))
        return float(acc.get_epsilon(delta))


#: The neighbouring relation of `epsilon` (and of the ε `pate dpsgd` targets).
RELATION = "add/remove-one"
#: The relation of `epsilon_replace_one`, the one PATE's ε is stated for.
RELATION_REPLACE = "replace-one"
#: What `pate dpsgd` writes next to its two ε (dpsgd.json).
RELATION_NOTE = (
    "eps_add_remove holds for neighbouring training sets that differ by adding or removing one example "
    "(the sampling rate and the number of steps are fixed in advance: pate derives them from the "
    "size of the training split, taken as public). release_eps (= eps_replace_one) holds for training "
    "sets of one size that differ by replacing one example, the relation PATE's eps and the data set's "
    "cumulative eps are stated for: group privacy of size 2 over the add/remove guarantee or Mironov's "
    "weak triangle inequality for RDP, whichever is smaller (both upper bounds); compare PATE with it.")


def epsilon_replace_one(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                        accountant: str = "rdp", rel_tol: float = 1e-6) -> float:
    """eps at `delta` of a DP-SGD run for replace-one neighbours: training sets of the same
    size that differ in one example (the relation PATE's ε holds for).

    Returned: the smaller of two upper bounds, each valid on its own: the group-privacy
    bound derived here, and the replace-one RDP curve that `pate ledger` composes
    (`analysis.mechanisms.composition.dpsgd_replace_one_rdp`, Mironov 2017, Proposition 11),
    converted at `delta`.

    First bound: group privacy of size 2 over the add/remove-one guarantee of
    `epsilon`. Fix q and the step count (they are constants of the run); write M for the
    DP-SGD run with them. For D and D' = D − x + x', the chain D → D − x → D' is one
    removal and one addition, and M is (e, d(e))-DP for each, where d(e) is the
    accountant's ``get_delta(e)`` (both directions are covered: dp-accounting's PLD
    accountant composes the remove and the add loss distributions; the RDP of the sampled
    Gaussian it computes bounds the divergence in both orders, Mironov, Talwar & Zhang
    2019, Sec. 3). For every event S:

        P[M(D) ∈ S] ≤ e^e P[M(D − x) ∈ S] + d(e) ≤ e^{2e} P[M(D') ∈ S] + (1 + e^e) d(e),

    i.e. M is (2e, (1 + e^e) d(e))-DP under replace-one (group privacy for a group of 2;
    Dwork & Roth 2014, Thm. 2.2, states it for pure DP; the chain above is the whole proof
    with δ). Returned: 2e for an e found by
    bisection with (1 + e^e) d(e) ≤ `delta`; every value the bisection returns is checked
    to satisfy that, so the result is an upper bound whether or not (1 + e^e) d(e) is
    monotone. Unlike dp-accounting's own ``REPLACE_ONE`` loss distribution of the
    subsampled Gaussian (a mixture-against-mixture pair for one step), this needs no claim
    that one pair of data sets is worst case for the whole composition (Lebeda, Regehr,
    Kamath & Steinke 2024 show such claims can fail); it is looser by at most the
    group-privacy step.

    With the PLD accountant, whose pessimistic rounding puts a mass of about e^-50 at an
    infinite loss, d(e) never falls below that mass and (1 + e^e) d(e) ≤ `delta` can have
    no solution once e is large (about 40); the RDP accountant's bound is used then.

    Args:
      noise_multiplier, sampling_rate, steps, delta, accountant: as in `epsilon`.
      rel_tol: relative precision of the bisection (the result errs upwards only).
    """
    _check(sampling_rate, steps, delta)
    if noise_multiplier <= 0:
        return math.inf
    from analysis.mechanisms import composition

    triangle = composition.single_eps(composition.dpsgd_cost(sampling_rate, noise_multiplier, steps), delta)
    return min(triangle, group_privacy_replace_one(noise_multiplier, sampling_rate, steps, delta, accountant, rel_tol))


def group_privacy_replace_one(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                              accountant: str = "rdp", rel_tol: float = 1e-6) -> float:
    """The first (group-privacy) bound of `epsilon_replace_one`, as derived in its docstring."""
    acc = make_accountant(accountant)
    log_target = math.log(delta)
    with quiet_absl(logging.ERROR):
        acc.compose(dp_event(noise_multiplier, sampling_rate, steps))

        def fits(e: float) -> bool:
            d = float(acc.get_delta(e))  # log(1 + e^e) + log d(e) <= log delta, without overflow
            return d <= 0.0 or e + math.log1p(math.exp(-e)) + math.log(d) <= log_target

        hi = max(float(acc.get_epsilon(delta)), 1e-3)
        while not fits(hi):
            hi *= 2.0
            if hi > 1e4:
                if accountant == "pld":
                    return group_privacy_replace_one(noise_multiplier, sampling_rate, steps, delta, "rdp", rel_tol)
                return math.inf
        lo = 0.0
        while hi - lo > rel_tol * hi:
            mid = 0.5 * (lo + hi)
            if fits(mid):
                hi = mid
            else:
                lo = mid
    return 2.0 * hi


def calibrate_noise(target_eps: float, delta: float, sampling_rate: float, steps: int,
                    accountant: str = "rdp", tol: float = 1e-4, relation: str = RELATION) -> float:
    """The smallest noise multiplier (to within `tol`) whose eps at `delta` is at most
    `target_eps` for `steps` Poisson-subsampled Gaussian steps at rate `sampling_rate`.

    ``relation`` is the neighbouring relation the target holds for: `RELATION`
    (add/remove-one, `epsilon` under `accountant`) or `RELATION_REPLACE` (replace-one:
    the RDP weak-triangle bound of `epsilon_replace_one`, whatever `accountant`; it is
    the bound `pate ledger` composes, so the ledger charges the target).

    eps is decreasing in sigma, so the search is a bracketed root find
    (`dp_accounting.calibrate_dp_mechanism`); the result is then nudged up until the
    accountant confirms eps <= target_eps, so the returned sigma never overspends.

    Raises:
      PateError: a target eps <= 0, delta outside (0, 1), or no sigma below 10^4
        meets the target.
    """
    if not (target_eps > 0 and math.isfinite(target_eps)):
        raise PateError(f"target eps must be a positive number, got {target_eps}")
    _check(sampling_rate, steps, delta)
    if relation == RELATION_REPLACE:
        return _calibrate_replace_one(target_eps, delta, sampling_rate, steps, tol)
    if relation != RELATION:
        raise PateError(f"unknown neighbouring relation {relation!r}; one of {RELATION}, {RELATION_REPLACE}")
    upper = 1e4
    if epsilon(upper, sampling_rate, steps, delta, accountant) > target_eps:
        raise PateError(f"eps = {target_eps} at delta = {delta} is out of reach even with noise "
                        f"multiplier {upper:g} for {steps} steps at sampling rate {sampling_rate:.4g}; "
                        "raise --eps or train fewer steps")
    lower = 1e-3
    if accountant == "pld":
        # A PLD of a tiny sigma has a huge support (slow); RDP's eps bounds PLD's from
        # above, so RDP's sigma is an upper end, and half of it is almost always a lower end.
        upper = calibrate_noise(target_eps, delta, sampling_rate, steps, "rdp", tol)
        lower = upper / 2
        while lower > 1e-2 and epsilon(lower, sampling_rate, steps, delta, "pld") <= target_eps:
            lower /= 2
    with quiet_absl(logging.ERROR):
        sigma = dp_accounting.calibrate_dp_mechanism(
            lambda: make_accountant(accountant),
            lambda s: dp_event(s, sampling_rate, steps),
            target_eps, delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lower, upper), tol=tol)
    sigma = float(sigma)
    while epsilon(sigma, sampling_rate, steps, delta, accountant) > target_eps:
        sigma += tol
    return sigma


def _calibrate_replace_one(target_eps: float, delta: float, sampling_rate: float, steps: int,
                           tol: float) -> float:
    """`calibrate_noise` for replace-one: bisection on the weak-triangle ε, which falls as
    sigma grows (every Rényi divergence of the sampled Gaussian does); the returned sigma
    is one the bound was checked at."""
    from analysis.mechanisms import composition

    def eps(sigma: float) -> float:
        return composition.single_eps(composition.dpsgd_cost(sampling_rate, sigma, steps), delta)

    lo, hi = 1e-2, 1e4
    if eps(hi) > target_eps:
        raise PateError(f"eps = {target_eps} (replace-one) at delta = {delta} is out of reach even with "
                        f"noise multiplier {hi:g} for {steps} steps at sampling rate {sampling_rate:.4g}; "
                        "raise --eps or train fewer steps")
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if eps(mid) <= target_eps:
            hi = mid
        else:
            lo = mid
    return hi


def _check(sampling_rate: float, steps: int, delta: float) -> None:
    if not 0 < sampling_rate <= 1:
        raise PateError(f"sampling rate must lie in (0, 1], got {sampling_rate}")
    if steps < 1:
        raise PateError(f"steps must be >= 1, got {steps}")
    if not 0 < delta < 1:
        raise PateError(f"delta must lie strictly between 0 and 1, got {delta}")
