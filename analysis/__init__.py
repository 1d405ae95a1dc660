"""Privacy analysis for PATE: numpy/scipy (and dp-accounting) only, no JAX — usable on
votes from anywhere.

A vote histogram is an integer array ``(queries, classes)``: row i counts the teachers
that predicted each class for query i; every row sums to the number of teachers.
Neighbouring data sets change one teacher's vote. Values are marked *public* (may be
published) or *private* (depend on the votes: never publish as is).

Quick start::

    import analysis
    votes = analysis.load_votes("examples/votes_simulated_250.npz")   # validated histogram
    analysis.plan_noise("gnmax", 1000, 2.0, 1e-5, accountant="pld")    # noise for a budget
    analysis.gnmax.data_independent_eps(1000, 100, 1e-5)     # RDP, classic conversion: 2.2478
    analysis.pld.gnmax_eps(1000, 100, 1e-5)                  # PLD (dp-accounting): 1.7601
    analysis.data_independent_items("gnmax", 1000, 1e-5, sigma=100)  # all of them + headline
    rep = analysis.gnmax_report(votes, 100, 1e-5, release_order=20)   # the full report (its sanitised value private: no ledger charged it)
    print(analysis.render_table(rep)); analysis.write_outputs(rep, "privacy.json", "privacy.png")

Modules (each imported on first use):

- `lnmax` — PATE 2017, Laplace noisy max: `data_independent_eps`, `data_dependent_eps`
  (private), `smooth_sensitivity`; the publishable release, `sanitized_eps`, is
  `analysis.sanitised.lnmax_release`'s.
- `gnmax` — PATE 2018, GNMax and Confident-GNMax: `data_independent_eps`,
  `data_dependent_eps` (private), `rdp`, `rdp_threshold`; `smooth_sensitivity` is
  `analysis.sanitised.gnmax_sensitivity`'s, the GNSS release `sanitized_eps` `analysis.sanitised.gnss`'s.
- `pld` — the data-independent ε from dp-accounting's privacy loss distributions
  (`gnmax_eps`, `lnmax_eps`, `gaussian_events`): the tightest.
- `rdp` — Rényi DP → (ε, δ) conversions (`eps_from_rdp`, "classic" | "improved").
- `plan` — the least noise for a budget (`plan`, `render`; here `plan_noise`, `render_plan`).
- `report` — the ε report (`lnmax_report`, `gnmax_report`); its table and files are
  `analysis.reporting.report_io`'s (`render_table`, `to_json`, `write_outputs`), the data-independent
  ε under every accountant `analysis.reporting.accountants`'s (`data_independent_items`).
- `votes` — reading and validating vote files (`load_votes`, `check_votes`,
  `labels_to_votes`).

Names exported here: see ``__all__``; the pipeline (teachers, labelling, student) lives
in the `pate` package, which needs JAX.
"""

from __future__ import annotations

import importlib

from analysis.core.errors import PateError

#: The public module names and where each lives (the rooms: `ARCHITECTURE.md`, `docs/privacy.md`).
_MODULES = {"lnmax": "bounds.lnmax", "gnmax": "bounds.gnmax", "pld": "accounting.pld",
            "rdp": "accounting.rdp", "plan": "planning.plan", "report": "reporting.report",
            "votes": "core.votes"}
# name -> (module, attribute): functions a user calls, loaded on first access.
_FUNCTIONS = {
    "load_votes": ("core.votes", "load_votes"),
    "check_votes": ("core.votes", "check_votes"),
    "labels_to_votes": ("core.votes", "labels_to_votes"),
    "eps_from_rdp": ("accounting.rdp", "eps_from_rdp"),
    "plan_noise": ("planning.plan", "plan"),
    "render_plan": ("planning.plan", "render"),
    "lnmax_report": ("reporting.report", "lnmax_report"),
    "gnmax_report": ("reporting.report", "gnmax_report"),
    "data_independent_items": ("reporting.accountants", "data_independent_items"),
    "render_table": ("reporting.report_io", "render_table"),
    "to_json": ("reporting.report_io", "to_json"),
    "write_outputs": ("reporting.report_io", "write_outputs"),
}

__all__ = ["PateError", *_MODULES, *_FUNCTIONS]


#: The flat module names of the analysis before its rooms (2026-11-28), still reachable as
#: ``analysis.<name>`` attributes so that scripts written against them keep working; new code
#: imports the room's module (``from analysis.sanitised import gnss``).
_FORMER = {"errors": "core.errors", "validation": "core.validation", "noise": "core.noise",
           "calibration": "accounting.calibration", "confident": "bounds.confident",
           "interactive": "bounds.interactive", "lnmax_release": "sanitised.lnmax_release",
           "gnmax_sensitivity": "sanitised.gnmax_sensitivity", "gnss": "sanitised.gnss",
           "composition": "mechanisms.composition", "fine_grained": "mechanisms.fine_grained",
           "fedavg_privacy": "baselines.fedavg_privacy", "merf": "baselines.merf",
           "headline_target": "planning.headline_target", "release_expectation": "planning.release_expectation",
           "simulated_votes": "planning.simulated_votes", "rounds": "planning.rounds",
           "report_io": "reporting.report_io", "accountants": "reporting.accountants",
           "empirical_eps": "reporting.empirical_eps"}


def __getattr__(name):
    # PEP 562: submodules and functions load on first use, so `import analysis` is cheap.
    if name in _MODULES:
        return importlib.import_module(f"analysis.{_MODULES[name]}")
    if name in _FORMER:
        return importlib.import_module(f"analysis.{_FORMER[name]}")
    if name in _FUNCTIONS:
        module, attr = _FUNCTIONS[name]
        return getattr(importlib.import_module(f"analysis.{module}"), attr)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
