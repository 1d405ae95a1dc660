"""`pate analyze`: the privacy report of a labelled run directory (`analyze_workdir`,
the privacy step of a run) or of a vote file made anywhere (`analyze_votes`).

Reads the private ``votes.npz`` and the released ``labels.npz`` (which queries were
answered, by which mechanism and noise) and writes ``privacy.json`` (the whole report,
values marked public / private; owner-only), ``privacy.png`` (its data-dependent curve is
private; owner-only) and ``release.json`` (publishable values only, with the headline ε).
No report is ever written over an input or a run artifact (`check_outputs`).
Uses only `analysis` and the run directory's names (no JAX).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from analysis.mechanisms import composition, events
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.reporting import report as report_mod
from analysis.reporting.accountants import data_independent_items
from analysis.reporting.report_io import PRIVATE_BANNER, StagedOutputs, render_table, stage_blobs, stage_outputs
from analysis.core import votes as votes_mod
from analysis.core.errors import CommitFailed, OptionError, PateError
from pate.store import ledger as ledger_mod
from pate.store import digests, rundir
from pate.store.identity import visible_directories
from pate.release import target as release_target
from pate.release.labels import CHECK_OFFSETS, content_digest, read_labels, release_files, require_charged
from pate.config import check_config, PrivacyConfig
from pate.store.door import publish, step
from pate.release import fine_grained_release as fine_release
from pate.release import round2_report as analyze_rounds
from pate.release.privacy_report import (check_outputs, data_independent_comparison, draw_charge, release_cost_of,
                                         report_for_release, report_of)


def _research(rep: report_mod.PrivacyReport, research_seed: bool) -> report_mod.PrivacyReport:
    """The report, warned when a research seed made any of its noise (labels or release)."""
    if not research_seed:
        return rep
    return dataclasses.replace(rep, warnings=tuple(rep.warnings) + (
        "a research seed (--seed) made noise of this release: whoever knows it can remove the noise; "
        "this is no real release (research_seed: true)",))


def _near_chance(rep: report_mod.PrivacyReport, labels: dict) -> report_mod.PrivacyReport:
    """The report, warned when its labels were released although the plan expected them near
    chance (`pate.release.outcome`: the public line labels.npz's meta records)."""
    from pate.release import outcome

    lines = outcome.warnings(labels)
    return dataclasses.replace(rep, warnings=tuple(rep.warnings) + lines) if lines else rep


def _own_figure(rep: report_mod.PrivacyReport, subject: str) -> dict:
    """This release's own headline, for `pate.store.ledger.Ledger.summary`."""
    return {"eps": rep.value("eps"), "delta": rep.value("delta_total"), "subject": subject}


def _labels_cost(record: Mechanism, labels: dict) -> composition.Cost:
    """The data-independent cost of a labels.npz's release: its labels, under the answer cap it
    records (`analysis.mechanisms.composition.labels_cost`)."""
    cap = int(float(labels["max_answers"])) if "max_answers" in labels else None
    return composition.labels_cost(record, int(np.asarray(labels["labels"]).size), max_answers=cap)


def _publish_line(data_set: dict) -> str:
    """The first line `pate analyze` prints: the data set's figure, release.json's first."""
    return ledger_mod.publish_line(data_set, rundir.RELEASE_JSON, "in the table below")


def _charge_then_commit(staged: StagedOutputs, charges: list, what: str) -> None:
    """Charges the draw, then renames the staged report into place (`pate.store.door.publish`,
    the order of every release); a refused charge (budget, repeat) or a commit that put
    nothing in place deletes the staged files and leaves no charge."""
    try:
        publish(charges, staged.commit, what)
    except BaseException:
        staged.discard()
        raise


def _keep_charged_draw(workdir, contents, identity: str | None, subject: str, book: ledger_mod.Ledger) -> str:
    """After a commit that failed but kept the draw's charge (`pate.store.door.publish`: a public
    file was readable for a moment, or the failure was no rename's), keeps what the draw was to
    publish in ``RUN/.unpublished-analyze/`` (owner-only) when the ledger records it, so that the
    next `pate analyze` of the same labels publishes that very draw (`_publish_kept_draw`): a
    charged draw is never lost, and never drawn again. Returns the words to add to the error."""
    from analysis.core.files import write_atomic

    if identity is None or not any(e.get("kind") == "sanitised-eps" and e.get("release") == identity
                                   for e in book.entries()):
        return ""
    folder = rundir.RunDir(workdir).path / rundir.UNPUBLISHED_DIR
    try:
        rundir.remove(folder)
        folder.mkdir(mode=0o700)
        files = []
        for k, (target, data, private) in enumerate(contents):
            write_atomic(folder / f"{k}.out", data, private=True)
            files.append({"file": f"{k}.out", "target": os.path.abspath(target), "private": bool(private)})
        write_atomic(folder / "kept.json", json.dumps({"release": identity, "subject": subject, "files": files})
                     .encode("utf-8"), private=True)
    except OSError as err:
        rundir.remove(folder)
        return f"; the charged draw could not be kept either ({err.strerror or err})"
    return (f"; the charged draw is kept in {folder}: run `pate analyze --workdir {rundir.RunDir(workdir).path}` "
            "again once the cause is fixed, and it publishes that draw (no new draw, no new charge)")


def _publish_kept_draw(workdir, book: ledger_mod.Ledger, subjects, echo) -> bool:
    """Publishes the draw an earlier `pate analyze` of these labels charged but could not put in
    place (`_keep_charged_draw`), to the files it was drawn for, all or nothing, with no new draw
    or charge; True when it did. A kept draw the ledger does not record (its charge withdrawn) or
    of other labels is deleted unpublished: nothing is published that was not charged."""
    folder = rundir.RunDir(workdir).path / rundir.UNPUBLISHED_DIR
    if not folder.is_dir() or folder.is_symlink():
        return False
    try:
        doc = json.loads((folder / "kept.json").read_text())
        blobs = [(f["target"], (folder / f["file"]).read_bytes(), bool(f["private"])) for f in doc["files"]]
        identity, subject = doc["release"], doc["subject"]
    except (OSError, ValueError, KeyError, TypeError):
        rundir.remove(folder)  # damaged: its draw was charged, the ledger refuses a new one (one line)
        return False
    if subject not in subjects or not any(e.get("kind") == "sanitised-eps" and e.get("release") == identity
                                          for e in book.entries()):
        rundir.remove(folder)
        return False
    staged = stage_blobs(blobs)
    if staged.identity(next((t for t, _, private in blobs if not private), "")) not in (None, identity):
        staged.discard()
        raise PateError(f"{folder} was changed since pate kept it (its release.json is not the draw the ledger "
                        "records); move it aside: the ledger still refuses a second draw of these labels")
    try:
        staged.commit()
    except BaseException:
        staged.discard()
        raise
    rundir.remove(folder)
    echo(f"published the sanitised draw an earlier `pate analyze` charged but could not put in place: "
         + ", ".join(t for t, _, _ in blobs) + " (no new draw, no new charge; `pate ledger` lists it)")
    return True


def _stage(rep: report_mod.PrivacyReport, json_path, plot_path, release_path, config=None,
           labels_sha256: str | None = None, research_seed: bool = False,
           data_set: dict | None = None, costs=()) -> StagedOutputs:
    """Stages (`analysis.reporting.report_io.stage_outputs`) the report with the `meta` every JSON artifact carries (config hash when
    made from a config, package version, time; for a run's labels, their sha256, which
    marks that release as made: `check_not_released`), ``research_seed: true`` when a
    seed made any of the released noise (never the seed), and the dp-accounting event of the
    release's own ``costs`` (`analysis.mechanisms.events.release_doc`)."""
    meta = rundir.metadata(config)
    if labels_sha256 is not None:
        meta["labels_sha256"] = labels_sha256
    extra = {"meta": meta, **({"research_seed": True} if research_seed else {})}
    if data_set is not None:
        extra["data_set"] = data_set
    if costs:
        extra["dp_event"] = events.release_doc(costs)
    return stage_outputs(rep, json_path, plot_path, release_path=release_path, extra=extra)


def check_not_released(paths, subjects) -> None:
    """Refuses a second sanitised release of the same labels.

    The sanitised ε is a noisy function of the private votes: every fresh draw published
    for the same release gives an attacker another sample, and averaging them removes the
    noise, while each run's headline ε counts one draw only. So a release.json that
    already records these labels (`subjects`: their `content_digest`, or the sha256 of
    labels.npz an older version recorded) is final. The ledger refuses the repeat too,
    whatever became of the file (`pate.store.ledger.Ledger.refuse_repeat`).

    Raises:
      PateError: one of `paths` is a release.json of these labels.
    """
    for path in paths:
        if path is None or not os.path.exists(path):
            continue
        try:
            meta = rundir.read_json(path).get("meta") or {}
        except PateError:
            continue  # unreadable: the ledger's record of the draw still refuses a repeat
        if isinstance(meta, dict) and meta.get("labels_sha256") in tuple(subjects):
            raise PateError(f"{path} already publishes the sanitised eps of these labels; a second noisy "
                            "release of the same private value would spend privacy that no headline "
                            "counts (averaging draws removes the noise). Publish the existing file; for a "
                            "new release, label again in a new run directory")


def analyze_workdir(workdir, **settings) -> report_mod.PrivacyReport | None:
    """Builds the privacy report of a labelled run and writes privacy.json, privacy.png
    (both private, owner-only) and release.json (publishable).

    A setting left as None comes from the `[privacy]` section of `config`, else of the
    run's own config.toml (so `pate analyze --workdir RUN` releases what `pate run` would),
    else from `PrivacyConfig`'s defaults (δ 1e-5, 8 moments, classic conversion, release
    cost 0.2, release order of the data-independent optimum). The sanitised ε is released once
    per labels (`check_not_released`). A draw an earlier `analyze` charged but could not put in
    place (its commit failed after the charge) is kept in ``RUN/.unpublished-analyze/`` and
    published by the next call, with no new draw or charge; that call returns None.

    Args:
      workdir: the run directory.
      settings: the keywords below (`_report_workdir`'s).
      delta: δ of the report.
      moments: moments accountant orders 1..moments (LNMax).
      beta: smoothness of the smooth-sensitivity release (LNMax default 0.09; GNMax
        default 0.1 / release order); ``gnss_beta`` overrides it for GNMax.
      seed: seed of the release noise (research only: ``0 <= seed < 2**128``, never
        written out); OS entropy when None.
      conversion, release_order, release_cost: GNMax release settings, see
        `analysis.reporting.report.gnmax_report`.
      json_path, plot_path, release_path: where to write; default
        ``workdir/privacy.json``, ``workdir/privacy.png`` and ``workdir/release.json``.
      echo: where the table goes.
      config: the run config the settings came from, if any (its hash goes into the
        JSON files' ``meta``, as in every artifact made from a config).

    Raises:
      PateError: missing or unreadable inputs, or a sanitised ε already released for
        these labels.
    """
    with step("analyze", workdir, echo=settings.get("echo", print)):
        return _report_workdir(workdir, **settings)


def _report_workdir(workdir, *, delta: float | None = None, moments: int | None = None,
                    beta: float | None = None, gnss_beta: float | None = None,
                    seed: int | None = None, conversion: str | None = None,
                    release_order: float | None = None, release_cost: float | None = None,
                    json_path=None, plot_path=None, release_path=None,
                    echo=print, config=None) -> report_mod.PrivacyReport | None:
    """The body of `analyze_workdir`, under its lock."""
    from analysis.core.noise import RELEASE_STREAM, NoiseSource

    noise = NoiseSource(seed, RELEASE_STREAM)  # refuses a bad seed before anything is read or written
    workdir = os.fspath(workdir)  # an existing directory: the door's lock checked it
    if config is None:  # the run's own settings; a damaged config.toml is refused, not defaulted
        config = rundir.RunDir(workdir).own_config()
    p = config.privacy if config is not None else PrivacyConfig()
    delta = p.delta if delta is None else delta
    moments = p.moments if moments is None else moments
    conversion = p.conversion if conversion is None else conversion
    # Round 2 (`pate label --round 2`): its own votes and labels, its headline composed with round 1's.
    two_rounds = os.path.exists(os.path.join(workdir, rundir.LABELS_ROUND2_NPZ))
    fine = None if two_rounds else _fine_grained_labels(workdir)
    if fine is not None:
        return _report_fine_grained(workdir, fine, config, delta, json_path, release_path, echo)
    names = ((rundir.VOTES_ROUND2_NPZ, rundir.LABELS_ROUND2_NPZ, rundir.LABELS_NPZ, rundir.RELEASE_ROUND1_JSON)
             if two_rounds else (rundir.VOTES_NPZ, rundir.LABELS_NPZ))
    inputs = [os.path.join(workdir, n) for n in names]
    check_outputs({"--json": json_path, "--plot": plot_path, "--release-json": release_path}, inputs, workdir)
    votes = votes_mod.load_votes(inputs[0])
    # The one validation of a release (`read_labels`), against the votes it was drawn from.
    # (round 2's votes are rows of its own queries, which are anywhere in the pool: `_round2_rows`)
    labels = read_labels(inputs[1], num_classes=votes.shape[1], pool_size=None if two_rounds else votes.shape[0])
    # Labels planned for a target headline (`pate.release.target`) are released as planned.
    plan = release_target.planned(labels)
    release_order, release_cost, gnss_beta = release_target.release_settings(plan, release_order, release_cost,
                                                                             gnss_beta)
    release_order = (p.release_order or None) if release_order is None else release_order
    release_cost = p.release_cost if release_cost is None else release_cost
    # A release is known by what it says, not by its file's bytes (zip timestamps, meta):
    # the same labels written again are the same release. The file digest an older
    # version recorded is checked too.
    labels_digest = content_digest(labels)
    subjects = (labels_digest, digests.file_digest(inputs[1]))
    json_path = os.path.join(workdir, rundir.PRIVACY_JSON) if json_path is None else json_path
    plot_path = os.path.join(workdir, rundir.PRIVACY_PNG) if plot_path is None else plot_path
    release_path = os.path.join(workdir, rundir.RELEASE_JSON) if release_path is None else release_path
    # Only a sanitised draw is final: a mechanism that draws none (permute-and-flip, the exponential
    # mechanism, exact-coin GNMax) is reported again, with no draw and no charge.
    sanitised = registry.from_arrays(labels, rundir.LABELS_NPZ).sanitised
    if sanitised:
        check_not_released([os.path.join(workdir, rundir.RELEASE_JSON), release_path], subjects)
    book = ledger_mod.Ledger.for_run(workdir, config)
    # A run belongs to one ledger, and nothing publishes on labels it does not record.
    require_charged(book, release_files(workdir), workdir, "drawn or charged")
    if _publish_kept_draw(workdir, book, subjects, echo):  # an earlier commit failed after its charge
        return None
    if sanitised:  # before any noise is drawn
        for subject in subjects:
            book.refuse_repeat("sanitised-eps", subject)
        book.refuse_drawn_elsewhere(subjects, visible_directories(workdir, config))
    if two_rounds:
        labels = analyze_rounds.round2_rows(inputs, votes, labels)
    record = registry.from_arrays(labels, rundir.LABELS_NPZ)  # the release's (round 2's with two rounds)
    # One β per mechanism: an explicit --beta serves either; else LNMax takes [privacy]
    # lnmax_beta and GNMax gnss_beta (0: 0.1 / release order), never the other's.
    beta = gnss_beta = record.release_beta(p, beta, gnss_beta)
    rep = report_for_release(votes, labels, delta=delta, moments=moments, beta=beta, gnss_beta=gnss_beta,
                             conversion=conversion, release_order=release_order,
                             release_cost=release_cost, noise=noise, publishable=True)  # charged once below
    rep = report_mod.extend(rep, data_independent_comparison(votes, labels, delta=delta, moments=moments))
    if plan is not None:
        rep = report_mod.extend(rep, release_target.report_items(plan, record, rep, release_cost, delta, conversion,
                                                                 labels.get(CHECK_OFFSETS)))
    # Seeded labels (labels.npz says so) or a seeded release: release.json says so too.
    research = seed is not None or (labels.get("meta") or {}).get("research_seed") is True or (
        two_rounds and rundir.read_json(inputs[3]).get("research_seed") is True)  # round 1's release
    rep = _research(rep, research)
    rep = _near_chance(rep, labels)
    if two_rounds:
        rep = analyze_rounds.cumulative(workdir, rep, labels, book, release_cost_of(rep, release_cost), delta,
                                        conversion)
    draw_cost = release_cost_of(rep, release_cost)  # this draw (None: the mechanism makes none)
    data_set = book.summary(delta, extra=[] if draw_cost is None else [draw_cost],
                            release=_own_figure(rep, labels_digest))
    # Written to temp files first (a full disk or read-only folder fails here, nothing charged,
    # nothing left), charged, then renamed into place: no failure leaves part of the outputs.
    own = [_labels_cost(record, labels), *([] if draw_cost is None else [draw_cost])]
    staged = _stage(rep, json_path, plot_path, release_path, config, labels_sha256=labels_digest,
                    research_seed=research, data_set=data_set, costs=own)
    identity, contents = staged.identity(release_path), staged.contents()
    try:
        _charge_then_commit(staged, draw_charge(book, rep, release_cost, subject=labels_digest, run=workdir,
                                                budget=p.total_budget, delta=delta, release=identity),
                            f"analyze ({release_path})")
    except CommitFailed:
        raise  # nothing reached its place: the charge was withdrawn
    except PateError as err:  # charged, not in place: kept for the next analyze to publish
        raise PateError(f"{err}{_keep_charged_draw(workdir, contents, identity, labels_digest, book)}") from None
    echo(_publish_line(data_set) + "\n" + render_table(rep, data_set))
    echo(ledger_mod.cumulative_line(book, delta))
    echo(f"wrote {release_path} (publishable), {json_path} and {plot_path} (private: owner-only)")
    return rep


def _fine_grained_labels(workdir) -> dict | None:
    """The run's labels.npz when its mechanism needs no teachers (no votes to analyse: a
    fine-grained release), else None."""
    path = os.path.join(workdir, rundir.LABELS_NPZ)
    if not os.path.exists(path):
        return None
    labels = read_labels(path)
    return None if registry.from_arrays(labels, path).needs_teachers else labels


def _report_fine_grained(workdir, labels: dict, config, delta: float, json_path, release_path,
                         echo) -> report_mod.PrivacyReport:
    """`pate analyze` of a fine-grained release: its data-independent ε from the recorded noise
    (`pate.release.fine_grained_release.report`), written to privacy.json and release.json. Nothing is
    drawn, so nothing is charged: the release was charged when `pate label` made it, and the
    ledger must record it (`pate.release.labels.require_charged`: else refused in one line)."""
    path = os.path.join(workdir, rundir.LABELS_NPZ)
    check_outputs({"--json": json_path, "--plot": None, "--release-json": release_path}, [path], workdir)
    rep = fine_release.report(labels, delta, path)
    research = (labels.get("meta") or {}).get("research_seed") is True
    rep = _research(rep, research)
    book = ledger_mod.Ledger.for_run(workdir, config)
    # A run belongs to one ledger: under a folder that does not hold these labels the headline
    # would count another folder's releases (or none); labels no ledger records are never published.
    require_charged(book, [path], workdir, "written or charged")
    json_path = os.path.join(workdir, rundir.PRIVACY_JSON) if json_path is None else json_path
    release_path = os.path.join(workdir, rundir.RELEASE_JSON) if release_path is None else release_path
    data_set = book.summary(delta, release=_own_figure(rep, content_digest(labels)))
    rep = fine_release.with_data_set_label_dp(rep, book.releases(), delta, data_set)
    staged = _stage(rep, json_path, None, release_path, config, labels_sha256=content_digest(labels),
                    research_seed=research, data_set=data_set, costs=[registry.from_arrays(labels, path).cost()])
    _charge_then_commit(staged, [], f"analyze ({release_path})")
    echo(_publish_line(data_set))
    echo(render_table(rep, data_set))
    echo(ledger_mod.cumulative_line(book, delta))
    echo(f"wrote {release_path} (publishable) and {json_path} (private: owner-only); a fine-grained release has "
         "no sanitised eps to draw")
    return rep


def analyze_votes(votes_path, mechanism: Mechanism, *, delta: float | None = None,
                  moments: int | None = None, beta: float | None = None, conversion: str | None = None,
                  release_order: float | None = None, release_cost: float | None = None,
                  queries: int | None = None, indices_path=None, input_is_labels: bool = False,
                  num_classes: int | None = None, seed: int | None = None, json_path=None,
                  plot_path=None, release_path=None, ledger: str | None = None,
                  total_budget: float | None = None, show_private: bool = False,
                  echo=print) -> report_mod.PrivacyReport:
    """`pate analyze --votes`: the privacy report of the answers `mechanism` gave on a
    vote file made anywhere (`analysis.core.votes.load_votes`), written only where asked.

    Args:
      votes_path: a vote histogram (or, with `input_is_labels`, a teachers × queries
        matrix of predicted labels over `num_classes` classes).
      mechanism: the aggregator that answered (a validated `analysis.mechanisms.registry` record).
      queries, indices_path: which rows were answered (`analysis.core.votes.select_queries`).
      delta, moments, beta, conversion, release_order, release_cost, seed: as in
        `analyze_workdir` (None: δ 1e-5, 8 moments, classic, release cost 0.2).
      json_path, plot_path, release_path: the report (private), its plot (private) and
        the publishable values; None writes none. A sanitised ε is drawn only for
        ``release_path`` (the one place it is published), and every draw is charged to the
        ledger of the data set the votes come from, refused over ``total_budget``. Without
        an output file the table shows the data-independent and (private) data-dependent ε.
        The ledger is the data set a votes.npz written by pate names, else ``ledger``
        (required then: `pate.store.ledger.Ledger.for_votes`); its recorded budget holds too.
      show_private: print the private rows (data-dependent ε, smooth sensitivity, their
        warnings) as research output. Without it they reach the terminal only beside a private
        report file (``json_path``, ``plot_path``): a figure that depends on the private votes
        is printed only where the user asked for it (docs/privacy.md). Printed, they are marked
        in the votes' data set's ledger as `pate plan --votes --on-private-votes` is (a
        ``private-tuning`` entry: parameters chosen from them are covered by no ε), so votes
        that name no data set need ``ledger`` then.

    Raises:
      OptionError: an output onto an input or a run artifact, a threshold above the
        number of teachers.
      PateError: unreadable or invalid votes or indices.
    """
    from analysis.core.noise import RELEASE_STREAM, NoiseSource

    noise = NoiseSource(seed, RELEASE_STREAM)
    defaults = PrivacyConfig()
    delta = defaults.delta if delta is None else delta
    moments = defaults.moments if moments is None else moments
    conversion = defaults.conversion if conversion is None else conversion
    release_cost = defaults.release_cost if release_cost is None else release_cost
    check_outputs({"--json": json_path, "--plot": plot_path, "--release-json": release_path},
                  [votes_path, indices_path])
    votes = votes_mod.load_votes(votes_path, input_is_labels=input_is_labels, num_classes=num_classes)
    indices = None if indices_path is None else votes_mod.load_indices(indices_path, votes.shape[0])
    if indices is not None and np.unique(indices).size != indices.size:
        raise PateError(f"{indices_path} repeats a query index; each answered query is listed once")
    teachers = int(votes[0].sum())
    if not mechanism.answerable(teachers):
        raise OptionError("--threshold", f"{mechanism.threshold:g} is above the {teachers} teachers of "
                          "the votes: no query could have been answered")
    answered = votes_mod.select_queries(votes, queries=queries, indices=indices)
    # A sanitised value is drawn only for a report written to a file; each draw is charged.
    draw = any(p is not None for p in (json_path, plot_path, release_path))
    book = None
    if draw or show_private:  # a draw is charged; private figures printed are marked (as `plan --votes`)
        book = ledger_mod.Ledger.for_votes(votes_path, ledger)
        if isinstance(votes_path, (str, os.PathLike)):  # the folder the votes were labelled under, or a refusal
            book.check_holds_votes(votes_path)
    if draw:
        book.check_budget([], total_budget, delta, "this sanitised draw")
    rep = report_of(mechanism, answered, delta, moments=moments, beta=beta, noise=noise, sanitize=draw,
                    conversion=conversion, release_order=release_order, release_cost=release_cost,
                    publishable=draw)  # each draw charged below
    rep = report_mod.extend(rep, data_independent_items(mechanism, answered.shape[0], delta,
                                                        moments=range(1, moments + 1)))
    rep = _research(rep, seed is not None)
    # The answers' own cost counts too: pate cannot tell whether they were charged when made.
    draw_cost = release_cost_of(rep, release_cost) if draw else None
    # ... and their float64 sampler's δ (`Mechanism.sampling_tv`): no published δ drops it.
    data_set = book.summary(delta, extra=[composition.labels_cost(mechanism, int(answered.shape[0])),
                                          *([] if draw_cost is None else [draw_cost])],
                            extra_tv=mechanism.sampling_tv(int(answered.shape[0]), votes.shape[1])) if draw else None
    own = [composition.labels_cost(mechanism, int(answered.shape[0])), *([] if draw_cost is None else [draw_cost])]
    staged = _stage(rep, json_path, plot_path, release_path, research_seed=seed is not None, data_set=data_set,
                    costs=own)
    charges = draw_charge(book, rep, release_cost, subject=None, budget=total_budget, delta=delta) if draw else []
    outputs = ", ".join(str(path) for path in (release_path, json_path, plot_path) if path)
    _charge_then_commit(staged, charges, f"analyze ({outputs})")
    private = show_private or json_path is not None or plot_path is not None
    if show_private:  # data-dependent figures on the terminal: whatever is chosen from them, no eps covers
        book.mark("private-tuning", note="pate analyze --votes --show-private printed the data-dependent values")
    table = render_table(rep, data_set, private=private)
    if show_private and json_path is None and plot_path is None:  # no private file to hold them: say what they are
        table = PRIVATE_BANNER + "\n" + table
    echo(table if data_set is None else _publish_line(data_set) + "\n" + table)
    for path in (release_path, json_path, plot_path):
        if path:
            echo(f"wrote {path}")
    return rep


def analyze(config, workdir, *, seed: int | None = None, echo=print) -> report_mod.PrivacyReport:
    """`pate analyze` of a run directory with the run config's `[privacy]` settings."""
    check_config(config, "pate.analyze")
    return analyze_workdir(workdir, seed=seed, echo=echo, config=config)
