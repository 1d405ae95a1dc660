"""A record's report is chosen by its type (`analysis.reporting.report_for`), never by its name: every
teacher mechanism of the registry has one, the most specific registration wins, and a record type
without one is refused instead of being sent to another mechanism's analysis (issue 51)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.mechanisms import registry
from analysis.mechanisms.noisy_max import GNMax
from analysis.reporting.report_for import ReportSettings, report_for

NOISE = {"gamma": 0.05, "sigma": 40.0, "threshold": 200.0, "sigma_threshold": 150.0}


def _votes(n=30):
    rng = np.random.default_rng(0)
    return rng.multinomial(250, rng.dirichlet(np.full(10, 0.1)), size=n)


@pytest.mark.parametrize("name", registry.TEACHER_NAMES)
def test_every_teacher_mechanism_has_its_own_report(name):
    cls = registry.record_type(name)
    record = cls(**{k: NOISE[k] for k in cls.option_names()})
    votes = _votes()
    queries = {"answered": np.ones(len(votes), bool)} if record.threshold_step else {}
    rep = report_for(record, votes, ReportSettings(delta=1e-5, noise=NoiseSource(0)), **queries)
    assert rep.mechanism == record.name
    keys = {item.key for item in rep.items}
    assert ("eps_sanitized" in keys) == record.sanitised  # a sanitised draw only where the record has one


def test_a_record_type_without_a_report_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Unreported(GNMax.__mro__[1]):  # the Gaussians' base, no report registered for it
        sigma: float
        name: ClassVar[str] = "unreported"

    with pytest.raises(PateError, match="no privacy report is known for the mechanism 'unreported'"):
        report_for(Unreported(40.0), _votes(), ReportSettings(delta=1e-5))
