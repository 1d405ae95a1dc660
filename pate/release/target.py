"""A labelling run's target headline: `[privacy] target_eps` turned into the release plan
`pate label` follows and records with its labels, and the rows the report adds for it.

The plan (`analysis.planning.headline_target.choose_release`) is made before any teacher votes,
from public values only: the config's mechanism and noise, its query count, δ and
conversion, the ensemble's size and class count, and a public vote model. It fixes the
queries and the GNSS release's order, β and cost; labels.npz carries it in its ``meta``
(``release_plan``, all public), and `pate analyze` releases with those settings and
reports P[headline ≤ target] (recomputed on the same simulated votes for the settings
actually used) in release.json.
"""

from __future__ import annotations

import numpy as np

from analysis.planning import headline_target
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.planning import plan as plan_mod
from analysis.core.errors import PateError
from analysis.reporting.report import Item
from analysis.planning.simulated_votes import StudentModel, VoteModel
from pate.release import fine_grained_release, outcome
from pate.release.outcome import vote_model

PLAN_KEY = "release_plan"  # labels.npz meta key


def _record(config, record: Mechanism | None) -> Mechanism:
    """The release's mechanism record: the caller's (built once per command), else the config's."""
    return registry.from_config(config.aggregation) if record is None else record


def choose(config, num_teachers: int, num_classes: int, *, record: Mechanism | None = None,
           budget=None, echo=print) -> headline_target.ReleaseChoice | None:
    """The release plan of ``config`` (None when ``[privacy] target_eps`` is 0), printed;
    ``record``: the config's mechanism record when the caller has built it.

    Raises:
      PateError: a target with ``budget`` (two plans for one release), with LNMax, or one
        no release meets.
    """
    p = config.privacy
    if not p.target_eps:
        return None
    if budget is not None:
        raise PateError("--budget and [privacy] target_eps each plan the release; use one (target_eps = 0 "
                        "turns the target off)")
    choice = headline_target.choose_release(
        _record(config, record), config.aggregation.queries, round1_target(config), p.delta, conversion=p.conversion,
        probability=p.target_probability, model=vote_model(config, num_teachers, num_classes))
    echo(choice.render())
    return choice


def round1_target(config) -> float:
    """The target round 1 plans for: ``[rounds] round1_target_eps`` when set (the rest of
    ``[privacy] target_eps`` is left to a round 2), else the whole target.

    Raises:
      PateError: a round-1 target above the target of both rounds.
    """
    whole, first = config.privacy.target_eps, config.rounds.round1_target_eps
    if first > whole:
        raise PateError(f"rounds.round1_target_eps = {first:g} is above privacy.target_eps = {whole:g}, the "
                        "target of both rounds; lower it")
    return first or whole


def check_round2(config) -> None:
    """Refuses a second round its mechanism cannot make: ``[rounds] check = "interactive"``
    without a threshold step (the check is Confident-GNMax's), and any mechanism without a
    sanitised release (the headline of both rounds composes round 1's published release:
    `pate.release.round2_report`). In `pate run`'s preflight, `pate plan --config` and `pate label
    --round 2`, before anything is computed."""
    name = config.aggregation.mechanism
    record = registry.record_type(name)
    with_step = ", ".join(n for n, r in registry.RECORDS.items() if r.threshold_step)
    if config.rounds.check == "interactive" and not record.threshold_step:
        raise PateError(f'rounds.check = "interactive" is the threshold step of {with_step}, but '
                        f"aggregation.mechanism is {name}; use {with_step}")
    if not record.sanitised:
        sanitised = ", ".join(n for n, r in registry.RECORDS.items() if r.sanitised)
        raise PateError(f"a second round composes round 1's sanitised release, and {name} publishes none: "
                        f"label two rounds with a mechanism that has one ({sanitised}), or one round with this one")


def choose_round2(config, num_teachers: int, num_classes: int, first: dict, *, earlier, record=None,
                  echo=print) -> headline_target.ReleaseChoice | None:
    """Round 2's plan under ``[privacy] target_eps`` (None when 0), for what is published: the
    headline of both rounds, the data-independent composition of round 1's releases
    (``earlier``: its labels' and sanitised draw's costs, as the headline counts them,
    `pate.release.round2_report.round1_costs`), round 2's labels and round 2's sanitised
    release (`analysis.planning.rounds.cumulative_headline`). `analysis.planning.rounds.plan_round2` gives the
    most queries (at most ``[rounds] queries``) for which a GNSS release at round 1's order
    keeps that headline ≤ the target, then the largest release cost that still does: exact,
    public values only (no vote, no probability). Printed; recorded with the labels.

    Raises:
      PateError: round 1 published no GNSS release (LNMax, or data-independent only), or
        not even one round-2 query fits the target after round 1's releases.
    """
    from analysis.mechanisms import composition
    from analysis.planning.rounds import plan_round2

    p = config.privacy
    if not p.target_eps:
        return None
    details = first.get("details") or {}
    try:
        order = float(details["release_order"])
    except (KeyError, TypeError, ValueError):
        raise PateError("round 1's release.json has no GNSS release order, so round 2's release cannot be planned "
                        "at it; set privacy.target_eps = 0 for round 2 or release round 1 by GNMax / "
                        "Confident-GNMax") from None
    record = _record(config, record)
    plan = plan_round2(record, config.rounds.queries, earlier, p.target_eps, p.delta, order=order,
                       conversion=p.conversion)
    if plan is None:
        spent = composition.compose(earlier, p.delta, conversion=p.conversion).eps
        raise PateError(f"no round 2 fits privacy.target_eps = {p.target_eps:g}: round 1's releases compose to eps "
                        f"{spent:.3f} data-independently and not even one more query with the cheapest sanitised "
                        "release keeps the published headline of both rounds within it; set rounds.rounds = 1 or "
                        "raise the target")
    r = plan.release
    choice = headline_target.ReleaseChoice(
        float(p.target_eps), 1.0, plan.num_queries, int(config.rounds.queries), r.order, r.beta, r.release_cost,
        r.sigma_ss, 1.0, 1.0, plan.eps, plan.eps, float(p.delta), p.conversion,
        vote_model(config, num_teachers, num_classes), 0, 0, route=headline_target.DATA_INDEPENDENT)
    echo(choice.render())
    return choice


#: Bins of the student's confidence for its calibration (`student_model`).
CALIBRATION_BINS = 10


def student_model(offsets: np.ndarray, eval_probs: np.ndarray, eval_y: np.ndarray,
                  num_teachers: int) -> StudentModel:
    """The public model of the round-1 student that Interactive-GNMax's teachers check: its
    check ``offsets`` on the candidate queries (in query order) and how often it is right at
    each confidence max_j ⌊T·p_j⌋ / T, measured on the public evaluation split (``eval_probs``,
    ``eval_y``): (right + ½)/(count + 1) per bin, the split's overall rate in an empty bin."""
    from analysis.bounds.interactive import check_offsets

    o = check_offsets(eval_probs, num_teachers)
    right = np.asarray(eval_probs).argmax(axis=1) == np.asarray(eval_y)
    k = np.minimum(o.max(axis=1) * CALIBRATION_BINS // int(num_teachers), CALIBRATION_BINS - 1)
    count = np.bincount(k, minlength=CALIBRATION_BINS)
    hits = np.bincount(k, weights=right, minlength=CALIBRATION_BINS)
    overall = (hits.sum() + 0.5) / (count.sum() + 1.0)
    cal = np.where(count > 0, (hits + 0.5) / (count + 1.0), overall)
    return StudentModel(np.asarray(offsets), tuple(float(c) for c in cal))


def plan_config(config, echo=print) -> headline_target.ReleaseChoice | None:
    """`pate plan --config`: the release plan of a run config (its data set gives the class
    count, its `[teachers]` the ensemble's size) under its target, if any, and what the release
    is expected to buy (`pate.release.outcome`), printed.

    Raises:
      PateError: what `pate label` and `pate run` would refuse of the release settings, a
        target no release meets, or labels expected near chance (unless
        ``[aggregation] allow_near_chance``)."""
    from pate.programs.data_facts import check_maps_ready, facts
    from pate.data import load_dataset, load_public
    from pate.programs.models import check_models

    needs_teachers = registry.record_type(config.aggregation.mechanism).needs_teachers
    check_maps_ready(config, teachers=needs_teachers)  # before any data is read
    check_models(config, facts(config), teachers=needs_teachers)  # as `pate run` before its first step
    if not needs_teachers:
        if config.privacy.target_eps:
            raise PateError("a fine-grained release's headline is fine_grained.eps itself, known before the run: "
                            "set that (--set fine_grained.eps=E) instead of a target")
        fine_grained_release.check_pool_fit(config.fine_grained, config.data.public_size)  # as `pate label`
        fine_grained_release.check_map_fit(config, load_public(config.data).pool_x)  # the map, the PCA's width
        if config.data_note:  # which values the data chose, once the checks have passed
            echo(config.data_note)
        echo(fine_grained_release.describe_plan(config))
        return None
    from pate.release.budget import accountable_record, resolve

    if config.rounds.rounds == 2:
        check_round2(config)
    record = accountable_record(config.aggregation, config.privacy)  # as `pate label` and `pate run` build it
    resolve(record, config.aggregation.queries, num_teachers=config.teachers.num_teachers,
            pool_size=config.data.public_size)
    classes = load_dataset(config.data).num_classes
    if config.data_note:  # which values the data chose, once the settings are checked
        echo(config.data_note)
    choice = choose(config, config.teachers.num_teachers, classes, record=record, echo=echo)
    outcome.of_config(config, record, config.teachers.num_teachers, classes,
                      queries=None if choice is None else choice.num_queries, echo=echo)
    if choice is None:
        echo(f"no target (privacy.target_eps = 0): the release answers the config's {config.aggregation.queries} "
             "queries; --target-eps plans the queries and the release for a headline")
    if config.rounds.rounds == 2:
        echo(f"round 2 is planned when it starts (`pate label --round 2`): at most {config.rounds.queries} queries, "
             f"as many as keep the published headline of both rounds (the data-independent composition of every "
             f"release) <= {config.privacy.target_eps:g} after round 1's releases")
    return choice


def planned_release_cost(record: Mechanism, choice: headline_target.ReleaseChoice):
    """The ledger cost of the sanitised draw `pate analyze` makes for labels planned by
    ``choice`` (it releases at the plan's order, β and cost: `release_settings`)."""
    return record.sanitised_cost({"release_order": choice.order, "beta": choice.beta}, choice.release_cost)


def budget_plan(choice: headline_target.ReleaseChoice) -> plan_mod.BudgetPlan:
    """The plan's queries as the `analysis.planning.plan.BudgetPlan` `pate label` answers (no cap)."""
    return plan_mod.BudgetPlan(choice.num_queries, None, choice.eps_data_independent,
                               choice.eps_data_independent, choice.delta)


def planned(labels: dict) -> headline_target.ReleaseChoice | None:
    """The release plan a labels.npz records (None: none)."""
    meta = (labels.get("meta") or {}).get(PLAN_KEY)
    return None if meta is None else headline_target.ReleaseChoice.from_meta(meta)


def release_settings(plan: headline_target.ReleaseChoice | None, release_order, release_cost, gnss_beta) -> tuple:
    """``(release_order, release_cost, gnss_beta)``: those given (not None), else the plan's."""
    if plan is None:
        return release_order, release_cost, gnss_beta
    return (plan.order if release_order is None else release_order,
            plan.release_cost if release_cost is None else release_cost,
            plan.beta if gnss_beta is None else gnss_beta)


def report_items(plan: headline_target.ReleaseChoice, record, report, release_cost: float, delta: float,
                 conversion: str, offsets=None) -> tuple[Item, ...]:
    """The report's rows on the target: P[headline ≤ target] and E[headline] of the release
    ``report`` made (its queries, ``release_order`` and ``beta``, and ``release_cost``) by
    ``record``, on the plan's simulated votes — public: no vote of the data set enters.
    ``offsets``: the check offsets the release recorded (a plan with a checked student)."""
    if plan.route == headline_target.DATA_INDEPENDENT:  # round 2, planned for the published headline exactly
        return (Item("target_eps", "target eps of both rounds' releases (planned)", plan.target_eps, True,
                     "data-independent: met before any vote"),
                Item("expected_headline_eps", "planned eps of both rounds' releases", plan.eps_data_independent,
                     True, "the data-independent composition of every release, as planned: public"))
    release = headline_target.release_parameters(report.value("release_order"), report.value("beta"), release_cost)
    student = None
    if plan.student_calibration:
        if offsets is None:
            raise PateError("the release plan checks a student but the labels hold no check offsets; they were "
                            "not written by pate label --round 2 or are damaged")
        student = StudentModel(np.asarray(offsets), plan.student_calibration)
    p, p_min, expected, _ = headline_target.headline_probability(
        record, int(report.value("num_queries")), release, plan.target_eps, delta, model=plan.model,
        conversion=conversion, ensembles=plan.ensembles, seed=plan.seed, offset=plan.offset_rdp, student=student,
        max_queries=max(plan.max_queries, int(report.value("num_queries"))))
    note = (f"over the release noise, on {plan.ensembles} ensembles simulated from a public model "
            f"({plan.model.teachers} teachers, accuracy {plan.model.accuracy:g}); least {p_min:.4f}"
            + ("; given round 1's published RDP" if plan.offset_rdp else ""))
    # A round-2 plan made before issue 32 planned the sum of both rounds' sanitised RDPs, which the headline
    # does not publish (`analysis.planning.rounds`: ex-post values do not add): named as what it is.
    # The target is on this release's own eps (the data set's figure, the headline, also counts its other releases).
    what = "this release's eps" if not plan.offset_rdp else "the sanitised RDP sum of both rounds (not a guarantee)"
    return (Item("target_eps", f"target of {what} (planned)", plan.target_eps, True,
                 f"P >= {plan.target_probability:g} asked for"),
            Item("p_headline_within_target", f"P[{what} <= target] (planned)", p, True, note),
            Item("expected_headline_eps", f"expected {what} (planned)", expected, True,
                 "same simulated votes: public"))
