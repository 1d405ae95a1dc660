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
      value: the released (noisy) ε, ``units * grid``, never below 0 (a draw below is
        published as 0: docs/privacy.md) — **public**.
      units: the released value as an integer number of grid steps (≥ 0) — public.
      grid: the grid step (fixed before the votes are seen) — public.
      eps_release, delta_release: the privacy the release itself costs — public.
      beta: the smoothness parameter — public.
      smooth_sensitivity: β-smooth bound on the local sensitivity of the data-dependent
        ε — private (it depends on the votes).
      noise_scale: scale of the added discrete Laplace noise, in ε — private.
      data_dependent: the raw accountant result — private.
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


def release_eps_cost(beta, delta) -> float:
    """Privacy cost ``eps = 2 (e^beta − 1) ln(2/delta)`` of the smooth-sensitivity release.

    The release adds *discrete* Laplace noise (:func:`sanitized_eps`); this is the ε for
    which discrete Laplace noise is ``(eps/2, beta)``-admissible at δ (proof in
    :func:`sanitized_eps`). The continuous version (Nissim, Raskhodnikova, Smith 2007,
    Lemma 2.9 / Corollary 2.4) has ``2 beta ln(2/delta)``; ``e^beta − 1`` replaces
    ``beta`` (4.6 % more at beta = 0.09). The 2017 paper's code uses ``2 beta ln(1/delta)``.

    Raises:
      PateError: the cost is not finite, or ``beta > eps/2`` (then the dilation step of
        the proof fails; never for ``delta <= 2/e``).
    """
    beta = check_positive("beta", beta)
    delta = check_delta(delta)
    eps = 2.0 * math.expm1(beta) * (math.log(2.0) - math.log(delta)) if beta < 700 else math.inf
    if not math.isfinite(eps):
        raise PateError(f"--beta {beta:g} makes the smooth-sensitivity release cost an infinite eps; "
                        f"use a beta below 1 (the default is {DEFAULT_BETA:g})")
    if beta > eps / 2:
        raise PateError(f"--delta {delta:g} is too large for a smooth-sensitivity release at beta "
                        f"{beta:g} (its proof needs beta <= (e^beta - 1) ln(2/delta)); use delta <= "
                        f"{2 / math.e:.3f}")
    return eps


def with_release(eps_labels: float, delta: float, beta: float | None = None) -> tuple[float, float, str]:
    """``(eps, delta_total, how)``: a data-independent ε of the labels, ``eps_labels`` at
    ``delta``, with the smooth-sensitivity release composed in — its (ε_r, δ) at β
    (``beta``, default :data:`DEFAULT_BETA`) added by basic composition (Dwork & Roth
    2014, Theorem 3.16), so at 2δ. Public: no vote enters."""
    beta = DEFAULT_BETA if beta is None else beta
    cost = release_eps_cost(beta, delta)
    return eps_labels + cost, 2 * delta, f"smooth-sensitivity release, beta {beta:g}, +eps {cost:.4f}"


def sanitized_eps(votes, gamma, delta, beta=DEFAULT_BETA, moments=DEFAULT_MOMENTS,
                  noise=None, grid: float = RELEASE_GRID) -> SanitizedEps:
    """Releases the data-dependent ε with smooth-sensitivity discrete Laplace noise on a grid.

    Formal guarantee. The data-dependent ε is ``E(d) = min_l (sum_i f_{i,l}(d) +
    log(1/delta)) / l``. Its local sensitivity is at most ``max_l (sum_i LS_{i,l}(d)) / l``
    (a minimum moves no more than its arguments; one teacher's change touches every
    query), so ``S(d) = max_l sum_i SS_{i,l}(d) / l`` with ``SS`` from
    :func:`smooth_sensitivity` is a β-smooth upper bound on it (taking the maximum over
    *all* orders tried keeps the data-dependent choice of order out of the noise scale).

    The release is on the public grid ``g``: ``Ẽ(d) = round(E(d)/g)`` is an integer whose
    local sensitivity is at most ``LS_E/g + 1``, so ``S̃ = S/g + 1`` (times 1 + 1e-9 for
    floating-point error) is a β-smooth upper bound on it (``S(d) ≤ e^β S(d')`` gives
    ``S̃(d) ≤ e^β S̃(d')``). Published: ``g · max(0, Ẽ(d) + Z)``, ``Z`` discrete Laplace of
    scale ``t(d) = 2 S̃(d)/eps_r``, sampled exactly (``analysis.core.noise``, CKS 2020), so no
    floating-point bit of the output depends on the votes (Mironov 2012).

    Proof that it is ``(eps_r, delta)``-DP with ``eps_r = 2 (e^β − 1) ln(2/δ)`` (the
    discrete analogue of NRS07 Lemma 2.5 with Laplace admissibility, Lemma 2.9). For
    neighbours ``d, d'`` with scales ``t, t'`` (``|ln t/t'| ≤ β``) and any set ``U`` of
    integers: (dilation) for ``t ≥ t'`` the pmf ratio ``p_t(k)/p_t'(k) = [tanh(1/2t) /
    tanh(1/2t')] · e^{|k|(1/t' − 1/t)} ≤ e^{eps_r/2}`` for ``|k| ≤ K = (eps_r/2) t /
    (e^β − 1)``, and ``Pr[|Z_t| > K] ≤ 2 e^{−K/t} = δ``; for ``t < t'`` the ratio is at
    most ``tanh(a)/tanh(b) ≤ a/b ≤ e^β ≤ e^{eps_r/2}`` everywhere; so ``Pr[Z_t ∈ U] ≤
    e^{eps_r/2} Pr[Z_t' ∈ U] + δ``. (sliding) ``|Ẽ(d) − Ẽ(d')| ≤ S̃(d') = (eps_r/2) t'``
    gives ``p_t'(k)/p_t'(k + Δ) ≤ e^{eps_r/2}`` pointwise. Chaining both: ``Pr[M(d) ∈ A]
    ≤ e^{eps_r} Pr[M(d') ∈ A] + δ``. The clipping at zero is post-processing of that draw (no
    cost); E(d) ≥ log(1/δ)/l_max > 0, so a negative draw is further from E(d) than 0 is.

    Args:
      votes: the answered queries' histograms (private).
      gamma, delta, beta, moments: as in :func:`data_dependent_eps`; ``beta`` > 0.
      noise: an ``analysis.core.noise.NoiseSource`` (fresh OS entropy when None).
      grid: the public grid step of the published value (> 0).

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
    eps_r = release_eps_cost(beta, delta)
    result = data_dependent_eps(flat, gamma, delta, l)
    ss = float(np.max(smooth_sensitivity(flat, gamma, l, beta).sum(axis=0) / l))
    if not (math.isfinite(result.eps) and math.isfinite(ss)):
        raise PateError(f"the data-dependent eps ({result.eps}) or its smooth sensitivity ({ss}) is not "
                        "finite at these settings: nothing can be released; check --gamma and --delta")
    units_exact = round(result.eps / grid)
    ss_units = ss / grid * (1.0 + _FLOAT_MARGIN) + 1.0
    scale_units = 2.0 * ss_units / eps_r
    if not math.isfinite(scale_units):
        raise PateError(f"the release noise is not finite (grid {grid:g}, eps_r {eps_r:g}); use a larger grid")
    source = NoiseSource() if noise is None else noise
    # Clipped at zero (the 2018 paper's clipping, as `analysis.sanitised.gnss` does): post-processing
    # of the (eps_r, δ)-DP draw, so free, and never further from E(d) > 0 than the draw itself.
    units = max(0, int(units_exact + discrete_laplace(source, scale_units)))
    return SanitizedEps(value=units * grid, units=units, grid=grid, eps_release=eps_r,
                        delta_release=delta, beta=beta, smooth_sensitivity=ss,
                        noise_scale=scale_units * grid, data_dependent=result)
