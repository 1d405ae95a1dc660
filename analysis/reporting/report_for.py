"""The report of a mechanism record's answers, chosen by the record's type, with the release settings
as one value.

A record does not build its report itself: `analysis.mechanisms` sits below `analysis.reporting`,
so the choice lives here, as one `functools.singledispatch` on the record's class (the most
specific registered class wins: LNMax over the pure argmaxes it extends, the exact-coin Gaussians
over the float64 ones). A record type with no report registered is refused in one line instead
of being sent to another mechanism's analysis; adding a mechanism adds one registration here.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from analysis.core.errors import PateError
from analysis.mechanisms import exact_gaussian, noisy_max
from analysis.mechanisms.record import Mechanism, PureArgmax
from analysis.reporting import report as report_mod
from analysis.sanitised.lnmax_release import DEFAULT_BETA as DEFAULT_LNMAX_BETA


@dataclasses.dataclass(frozen=True)
class ReportSettings:
    """What a report is computed with, public values and choices only, as one value.

    Attributes:
      delta: δ of every (ε, δ) figure.
      moments: the moments accountant's largest order (LNMax and the pure argmaxes).
      conversion: RDP → (ε, δ) conversion (the Gaussians).
      beta: the smoothness of the record's sanitised release (None: its default).
      release_order, release_cost: the GNSS release's order (None: the data-independent optimum)
        and RDP cost.
      sanitize: draw the sanitised value (False: the brief report, nothing drawn).
      publishable: the caller charges the draw once to the data set's ledger
        (`analysis.reporting.report.lnmax_report`).
      noise: an ``analysis.core.noise.NoiseSource`` for the sanitised draw (OS entropy when None).
    """

    delta: float
    moments: int = 8
    conversion: str = "classic"
    beta: float | None = None
    release_order: float | None = None
    release_cost: float = 0.2
    sanitize: bool = True
    publishable: bool = False
    noise: object = None

    @property
    def moment_range(self) -> range:
        return range(1, int(self.moments) + 1)


@functools.singledispatch
def report_for(record: Mechanism, rows: np.ndarray, settings: ReportSettings, **queries) -> report_mod.PrivacyReport:
    """The report of ``record``'s answers to ``rows`` (the answered queries' votes; every queried
    row for a threshold step). ``queries``: what a threshold step's report needs besides
    (``answered``, ``max_answers``, ``offsets``, ``num_teachers``)."""
    raise PateError(f"no privacy report is known for the mechanism {getattr(record, 'name', record)!r}: "
                    "a new mechanism registers its report in analysis.reporting.report_for")


@report_for.register
def _pure(record: PureArgmax, rows, settings: ReportSettings, **queries):
    """Permute-and-flip, the exponential mechanism: data-independent headline, nothing drawn."""
    return report_mod.pure_report(rows, record, settings.delta, settings.moment_range)


@report_for.register
def _lnmax(record: noisy_max.LNMax, rows, settings: ReportSettings, **queries):
    """PATE 2017: the smooth-sensitivity release when ``sanitize``."""
    if not settings.sanitize:
        return report_mod.brief_lnmax_report(rows, record.gamma, settings.delta, settings.moment_range)
    return report_mod.lnmax_report(rows, record.gamma, settings.delta, settings.moment_range,
                                   DEFAULT_LNMAX_BETA if settings.beta is None else settings.beta,
                                   noise=settings.noise, publishable=settings.publishable)


def _gaussian(record, rows, settings: ReportSettings, **queries):
    """PATE 2018: GNMax or Confident-GNMax with its GNSS release."""
    params = record.params()
    return report_mod.gnmax_report(rows, record.sigma, settings.delta, threshold=params.get("threshold"),
                                   sigma_threshold=params.get("sigma_threshold"), conversion=settings.conversion,
                                   release_order=settings.release_order, beta=settings.beta,
                                   release_cost=settings.release_cost, noise=settings.noise,
                                   sanitize=settings.sanitize, publishable=settings.publishable, **queries)


def _exact_gaussian(record, rows, settings: ReportSettings, **queries):
    """GNMax and Confident-GNMax with exact coins: data-independent headline, nothing drawn."""
    kept = {k: queries[k] for k in ("answered", "max_answers", "offsets") if k in queries}
    return report_mod.exact_gnmax_report(rows, record, settings.delta, conversion=settings.conversion, **kept)


for _kind in (noisy_max.GNMax, noisy_max.ConfidentGNMax):
    report_for.register(_kind, _gaussian)
for _kind in (exact_gaussian.GNMaxExact, exact_gaussian.ConfidentGNMaxExact):
    report_for.register(_kind, _exact_gaussian)
