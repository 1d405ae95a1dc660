"""What a GNSS release is expected to publish: the expected headline ε of a
Confident-GNMax release and the chance that it lands well above that, over the release
noise. Reads the private votes: for choosing settings in research (``bench/``), never
for a release.
"""

from __future__ import annotations

import numpy as np

from analysis.sanitised import gnss
from analysis.mechanisms.noisy_max import ConfidentGNMax


def expected_headline(f: float, s: float, cost: float, order: float, delta: float, conversion: str,
                      independent: float) -> tuple[float, float]:
    """(E[headline], P[headline > E + 0.5]) over Z ~ N(0, 1) for a sanitised RDP max(0, f + sZ).

    The headline is ``min(conv(max(0, f + s Z) + cost), independent)`` at ``order``
    (`analysis.accounting.rdp.eps_from_rdp`), the GNSS grid rounding ignored; the expectation is a
    40-node Gauss-Hermite sum. ``f`` (the data-dependent RDP) and ``s`` (the GNSS noise
    std) depend on the votes: the result is private, for choosing settings in research.
    """
    from analysis.accounting.rdp import eps_from_rdp

    z, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    released = np.maximum(0.0, f + s * z)
    eps = np.array([eps_from_rdp([order], [r + cost], delta, conversion)[0] for r in released])
    headline = np.minimum(eps, independent)
    mean = float(np.sum(w * headline))
    # The tail exactly: the headline rises with the released RDP r, so it exceeds m = mean + 0.5
    # where r > r*, eps(r* + cost) = m (bisection), unless the data-independent route caps it.
    target = mean + 0.5
    if independent <= target:
        return mean, 0.0
    lo, hi = 0.0, max(f, 0.0) + 20.0 * s + 20.0
    if eps_from_rdp([order], [lo + cost], delta, conversion)[0] > target:
        return mean, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps_from_rdp([order], [mid + cost], delta, conversion)[0] <= target else (lo, mid)
    from scipy.stats import norm

    return mean, float(norm.sf((hi - f) / s)) if s > 0 else float(f > hi)


def release_expectation(votes: np.ndarray, answered: np.ndarray, threshold: float, sigma_threshold: float,
                        sigma: float, privacy, seed: int):
    """(E[headline], P[headline > E + 0.5], the `gnss.sanitized_eps` result) of a Confident-GNMax
    release of `votes` whose `answered` mask is known, at `privacy`'s fixed release order, cost,
    β and conversion (`expected_headline`). `privacy` is a ``[privacy]`` section
    (`pate.config.PrivacyConfig`: ``delta``, ``conversion``, ``release_order`` (0: order 12),
    ``gnss_beta`` (0: the default), ``release_cost``). Reads private votes: research only."""
    from analysis.core.noise import RELEASE_STREAM, NoiseSource

    order = privacy.release_order or 12.0
    beta, sigma_ss = gnss.gnss_parameters(order, privacy.gnss_beta or None, privacy.release_cost)
    record = ConfidentGNMax(threshold, sigma_threshold, sigma)
    indep = record.independent_eps(votes.shape[0], privacy.delta, conversion=privacy.conversion)
    di_route, _ = gnss.gnss_headline_independent(indep, beta, sigma_ss, privacy.delta, privacy.conversion)
    san = gnss.sanitized_eps(votes, sigma, privacy.delta, order, beta, sigma_ss, threshold=threshold,
                             sigma_threshold=sigma_threshold, answered_mask=answered,
                             noise=NoiseSource(seed, RELEASE_STREAM))
    # the draw's centre: the data-dependent RDP shifted up to an upper bound (`gnss.release_centre`)
    centre, _ = gnss.release_centre(san.rdp_exact, san.smooth_sensitivity, san.grid,
                                    gnss.upper_bound(sigma_ss, beta, privacy.delta))
    mean, tail = expected_headline(centre * san.grid, san.noise_std, san.rdp_gnss, order, privacy.delta,
                                   privacy.conversion, di_route)
    return mean, tail, san
