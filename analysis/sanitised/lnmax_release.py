"""PATE 2017's sanitised release of the LNMax data-dependent ε: the ε of
``analysis.bounds.lnmax.data_dependent_eps`` published with discrete Laplace noise scaled to its
smooth sensitivity (``analysis.bounds.lnmax.smooth_sensitivity``) on a public grid, and the
privacy the release itself costs.

Papernot et al., ICLR 2017 (arXiv:1610.05755), Appendix C; Nissim, Raskhodnikova, Smith,
"Smooth Sensitivity and Sampling in Private Data Analysis", STOC 2007 ("NRS07").
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from analysis.core.errors import PateError
from analysis.bounds.lnmax import (DEFAULT_MOMENTS, MomentsEps, check_moments, data_dependent_eps, flat_votes,
                            smooth_sensitivity)
from analysis.core.validation import check_delta, check_positive


RELEASE_GRID = 1e-3  # default grid step of a published sanitised ε (public)
DEFAULT_BETA = 0.09  # default smoothness of the LNMax smooth-sensitivity release (PATE 2017 code)
_FLOAT_MARGIN = 1e-9  # relative slack on the smooth sensitivity for floating-point error


@dataclasses.dataclass(frozen=True)
class SanitizedEps:
    """The data-dependent ε released through the smooth-sensitivity mechanism.

    Attributes:
      value: the released (noisy) ε, ``units * grid``: an upper bound on the data-dependent ε
        except with probability ``eta`` (:func:`sanitized_eps`), never below 0 — **public**.
      units: the released value as an integer number of grid steps (≥ 0) — public.
      grid: the grid step (fixed before the votes are seen) — public.
      eps_release, delta_release: the privacy the release itself costs — public.
      beta: the smoothness parameter — public.
      smooth_sensitivity: β-smooth bound on the local sensitivity of the data-dependent
        ε — private (it depends on the votes).
      noise_scale: scale of the added discrete Laplace noise, in ε — private.
      data_dependent: the raw accountant result — private.
      eta: the probability that ``value`` is below the data-dependent ε — public.
      shift: the centre's shift a in units of the grid's smooth sensitivity — public.
    """

    value: float
    units: int
    grid: float
    eps_release: float
    delta_release: float
    beta: float
    smooth_sensitivity: float
    noise_scale: float
    data_dependent: MomentsEps
    eta: float = 0.0
    shift: float = 0.0


class _Release(NamedTuple):
    """The public parts of the release at (β, δ, η): ``s`` = (e^β − 1) ln(2/δ), both the dilation's
    ε and the noise's slide (its scale is S̃/s), the ``shift`` a (in units of S̃) and ``k``
    (`sanitized_eps`)."""

    s: float
    shift: float
    k: float


def _release_parts(beta, delta, eta=None) -> _Release:
    beta = check_positive("beta", beta)
    delta = check_delta(delta)
    eta = delta if eta is None else float(eta)
    if not 0.0 < eta < 1.0:
        raise PateError(f"the probability eta that a sanitised upper bound fails must lie in (0, 1), got {eta!r}")
    u = math.expm1(beta) if beta < 700 else math.inf
    dilation = u * (math.log(2.0) - math.log(delta))
    if not math.isfinite(dilation):
        raise PateError(f"--beta {beta:g} makes the smooth-sensitivity release cost an infinite eps; "
                        f"use a beta below 1 (the default is {DEFAULT_BETA:g})")
    if beta > dilation:
        raise PateError(f"--delta {delta:g} is too large for a smooth-sensitivity release at beta "
                        f"{beta:g} (its proof needs beta <= (e^beta - 1) ln(2/delta)); use delta <= "
                        f"{2 / math.e:.3f}")
    shift = 0.5 + math.log(1.0 / eta) / dilation
    return _Release(dilation, shift, (1.0 + shift * u) * (1.0 + _FLOAT_MARGIN))


def release_eps_cost(beta, delta, eta=None) -> float:
    """Privacy cost ``(e^β − 1) ln(2/δ) · (1 + k)`` of the smooth-sensitivity release published
    as an upper bound that fails with probability ``eta`` (default δ), ``k = 1 + a (e^β − 1)``
    with ``a = ½ + ln(1/η) / ((e^β − 1) ln(2/δ))`` (proof in :func:`sanitized_eps`):
    ``2 (e^β − 1) ln(2/δ) + (e^β − 1)(ln(1/η) + (e^β − 1) ln(2/δ)/2)``, up to a 1e-9 margin.

    Without the bound (k = 1) it is ``2 (e^β − 1) ln(2/δ)``, the ε for which discrete Laplace
    noise is ``(eps/2, beta)``-admissible at δ. The continuous version (Nissim,
    Raskhodnikova, Smith 2007, Lemma 2.9 / Corollary 2.4) has ``2 beta ln(2/delta)``; ``e^beta −
    1`` replaces ``beta`` (4.6 % more at beta = 0.09). The 2017 paper's code uses ``2 beta
    ln(1/delta)`` and publishes a draw centred on the estimate, below it half the time.

    Raises:
      PateError: the cost is not finite, or ``beta > (e^β − 1) ln(2/δ)`` (then the dilation step
        of the proof fails; never for ``delta <= 2/e``).
    """
    parts = _release_parts(beta, delta, eta)
    return parts.s + parts.k * parts.s


def with_release(eps_labels: float, delta: float, beta: float | None = None, eta: float | None = None
                 ) -> tuple[float, float, str]:
    """``(eps, delta_total, how)``: a data-independent ε of the labels, ``eps_labels`` at
    ``delta``, with the smooth-sensitivity release composed in — its (ε_r, δ) at β
    (``beta``, default :data:`DEFAULT_BETA`) added by basic composition (Dwork & Roth
    2014, Theorem 3.16), so at 2δ. Public: no vote enters."""
    beta = DEFAULT_BETA if beta is None else beta
    cost = release_eps_cost(beta, delta, eta)
    return eps_labels + cost, 2 * delta, f"smooth-sensitivity release, beta {beta:g}, +eps {cost:.4f}"


def sanitized_eps(votes, gamma, delta, beta=DEFAULT_BETA, moments=DEFAULT_MOMENTS,
                  noise=None, grid: float = RELEASE_GRID, eta: float | None = None) -> SanitizedEps:
    """Releases an upper confidence bound on the data-dependent ε with smooth-sensitivity
    discrete Laplace noise on a grid.

    Formal guarantee. The data-dependent ε is ``E(d) = min_l (sum_i f_{i,l}(d) +
    log(1/delta)) / l``. Its local sensitivity is at most ``max_l (sum_i LS_{i,l}(d)) / l``
    (a minimum moves no more than its arguments; one teacher's change touches every
    query), so ``S(d) = max_l sum_i SS_{i,l}(d) / l`` with ``SS`` from
    :func:`smooth_sensitivity` is a β-smooth upper bound on it (taking the maximum over
    *all* orders tried keeps the data-dependent choice of order out of the noise scale).
    On the public grid ``g``, ``S̃ = S/g·(1 + 1e-9) + 1`` is a β-smooth bound on the local
    sensitivity of ``E/g`` plus one rounding step.

    Published: ``g · max(0, h(d) + Z)`` with ``h(d) = round(E(d)/g + a S̃(d))`` and ``Z``
    discrete Laplace of scale ``t(d) = S̃(d)/s``, sampled exactly (``analysis.core.noise``,
    CKS 2020), so no floating-point bit of the output depends on the votes (Mironov 2012).
    With ``u = e^β − 1``, ``s = u ln(2/δ)``, ``a = ½ + ln(1/η)/s``, ``k = 1 + a u``:

    (bound) ``h ≥ E/g + a S̃ − ½`` and ``S̃ ≥ 1``, and ``P[Z < −x] ≤ e^{−x/t}`` for the discrete
    Laplace, so ``P[h + Z < E/g] ≤ e^{−(a − ½) s} = η``: the published value is below E(d)
    with probability at most η (clipping at 0 lowers nothing below E(d) > 0). A draw centred
    on E(d), as the 2017 code makes, is below E(d) half the time.

    (privacy, replace-one; the discrete analogue of NRS07 Lemma 2.5 with Laplace admissibility,
    Lemma 2.9) ``(ε_r, δ)``-DP with ``ε_r = s + k s`` = :func:`release_eps_cost`. For neighbours
    ``d, d'`` with scales ``t, t'`` (``|ln t/t'| ≤ β``) and any set ``U`` of integers: (dilation)
    for ``t ≥ t'`` the pmf ratio ``p_t(k)/p_t'(k) = [tanh(1/2t) / tanh(1/2t')] · e^{|k|(1/t' −
    1/t)} ≤ e^{s}`` for ``|k| ≤ K = s t / u``, and ``Pr[|Z_t| > K] ≤ 2 e^{−K/t} = δ``; for ``t <
    t'`` the ratio is at most ``tanh(a)/tanh(b) ≤ a/b ≤ e^β ≤ e^{s}`` everywhere; so ``Pr[Z_t ∈
    U] ≤ e^{s} Pr[Z_t' ∈ U] + δ``. (sliding) ``|E − E'| ≤ min(S, S')`` and ``|S̃ − S̃'| ≤ u
    min(S̃, S̃')`` (β-smoothness), so with the rounding ``|h(d) − h(d')| ≤ k S̃(d') = k s t'``
    and ``p_t'(k)/p_t'(k + Δ) ≤ e^{k s}`` pointwise. Chaining both: ``Pr[M(d) ∈ A] ≤ e^{ε_r}
    Pr[M(d') ∈ A] + δ``. The clipping at zero is post-processing.

    Args:
      votes: the answered queries' histograms (private).
      gamma, delta, beta, moments: as in :func:`data_dependent_eps`; ``beta`` > 0.
      noise: an ``analysis.core.noise.NoiseSource`` (fresh OS entropy when None).
      grid: the public grid step of the published value (> 0).
      eta: the probability that the published value is below E(d) (public; default δ).

    Raises:
      PateError: bad parameters, or a release whose cost, sensitivity or value is not finite.
    """
    from analysis.core.noise import NoiseSource, discrete_laplace

    gamma = check_positive("gamma", gamma)
    beta = check_positive("beta", beta)
    delta = check_delta(delta)
    grid = check_positive("grid", grid)
    l = check_moments(moments)
    flat = flat_votes(votes)
    parts = _release_parts(beta, delta, eta)
    eps_r = release_eps_cost(beta, delta, eta)
    result = data_dependent_eps(flat, gamma, delta, l)
    ss = float(np.max(smooth_sensitivity(flat, gamma, l, beta).sum(axis=0) / l))
    if not (math.isfinite(result.eps) and math.isfinite(ss)):
        raise PateError(f"the data-dependent eps ({result.eps}) or its smooth sensitivity ({ss}) is not "
                        "finite at these settings: nothing can be released; check --gamma and --delta")
    ss_units = ss / grid * (1.0 + _FLOAT_MARGIN) + 1.0
    centre = round(result.eps / grid + parts.shift * ss_units)
    scale_units = ss_units / parts.s
    if not math.isfinite(scale_units):
        raise PateError(f"the release noise is not finite (grid {grid:g}, eps_r {eps_r:g}); use a larger grid")
    source = NoiseSource() if noise is None else noise
    units = max(0, int(centre + discrete_laplace(source, scale_units)))
    return SanitizedEps(value=units * grid, units=units, grid=grid, eps_release=eps_r,
                        delta_release=delta, beta=beta, smooth_sensitivity=ss,
                        noise_scale=scale_units * grid, data_dependent=result,
                        eta=delta if eta is None else float(eta), shift=parts.shift)
