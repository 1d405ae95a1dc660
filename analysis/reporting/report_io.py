"""The report's outputs: the terminal table, the JSON documents (``privacy.json``, whole
and private; ``release.json``, publishable), the plot, staged as
one commit. The atomic writer every file goes through is `analysis.core.files`'s. Reads a ``PrivacyReport`` (``analysis.reporting.report``), never
builds one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from analysis.core.errors import CommitFailed, PateError
from analysis.core import files
from analysis.mechanisms import registry

if TYPE_CHECKING:
    from analysis.reporting.report import PrivacyReport


def _format(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:.3f}"


#: The first line of a table that prints private rows without a private report file beside it.
PRIVATE_BANNER = ("PRIVATE RESEARCH OUTPUT: the rows marked 'NO (private)' and the private warnings depend on the "
                  "private votes; never publish them, nor choose a release's parameters from them")


def render_table(report: PrivacyReport, data_set: Mapping | None = None, private: bool = True) -> str:
    """The report as a plain-text table with a 'publish?' column, then its warnings. The
    report's ``eps`` is this release's own; the one figure called the headline is the data
    set's (``data_set``, `pate.store.ledger.Ledger.summary`, printed before the table by
    `pate.store.ledger.publish_line`). Without it the table says that no headline was given.
    ``private`` False withholds the private rows and warnings (naming them and ``--show-private``)."""
    withheld = [item.label for item in report.items if not item.public] if not private else []
    rows = [(item.label, _format(item.value), "yes" if item.public else "NO (private)", item.note)
            for item in report.items if private or item.public]
    header = ("quantity", "value", "publish?", "")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(3)]
    lines = [f"Privacy report — {report.mechanism}"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header[:3], widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        text = "  ".join(c.ljust(w) for c, w in zip(row[:3], widths))
        lines.append((text + ("  " + row[3] if row[3] else "")).rstrip())
    if any(item.key == "eps" for item in report.items):
        if data_set is not None:
            lines.append(f"Publish the HEADLINE (the PUBLISH line: eps {data_set['eps']:.4g} at delta "
                         f"{data_set['delta']:.3g}, every release of the data set) and only the rows marked 'yes'; "
                         "this release's eps counts this release alone; the other rows depend on the private votes.")
        else:
            lines.append("No ledger was given, so there is no HEADLINE here: this release's eps counts this release "
                         "alone, not the data set's other releases (pate ledger); publish only the rows marked "
                         "'yes', the others depend on the private votes.")
        changes = ("one teacher's vote changes" if registry.record_type(report.mechanism).needs_teachers
                   else "that record's k votes move")
        lines.append(f"Neighbouring relation: {NEIGHBOURING_RELATION} (two training sets that differ in "
                     f"one example, replaced: {changes}).")
    else:
        lines.append("Publish only the rows marked 'yes'; the others depend on the private votes.")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    if withheld or (not private and report.private_warnings):
        lines.append(f"withheld, private (they depend on the private votes): {', '.join(withheld) or 'warnings'}"
                     f"{' and their warnings' if withheld and report.private_warnings else ''}; --show-private "
                     "prints them as research output, never to publish")
    for warning in report.private_warnings if private else ():
        lines.append(f"warning (private, do not publish): {warning}")
    return "\n".join(lines)


def jsonable(obj):
    """`obj` as plain JSON values: mappings and sequences recursively, numpy arrays as
    lists, numpy scalars as Python numbers, and NaN / ±inf as null (JSON has no such
    numbers; a reader gets a number or null). Every JSON file of the project goes through
    it (``pate.store.rundir.write_json`` too)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def to_json(report: PrivacyReport, extra: dict | None = None) -> dict:
    """The whole report (``privacy.json``, private): ``public`` and ``private`` sections.

    Every value sits in exactly one of the two. Warnings that mention private values sit
    under ``private``. Publish :func:`release_json` instead of this document.
    """
    doc = {
        "mechanism": report.mechanism,
        "public": {i.key: jsonable(i.value) for i in report.items if i.public},
        "private": {i.key: jsonable(i.value) for i in report.items if not i.public},
        "notes": "PRIVATE document: values under 'private' depend on the private votes. "
                 "Publish release.json, not this file.",
        "warnings": list(report.warnings),
    }
    doc["private"]["warnings"] = list(report.private_warnings)
    if extra:
        doc.update(jsonable(extra))
    return doc


#: The neighbouring relation every PATE figure holds for (release.json names it).
NEIGHBOURING_RELATION = "replace-one"
RELATION_NOTE = (
    "eps at delta holds for private training sets that differ by replacing one example by "
    "another. pate's partition gives each position of a fixed permutation of the training set "
    "to one teacher, so a replacement changes one teacher's shard and, on every query, at most "
    "that teacher's vote; the analysis bounds exactly that change (for votes made elsewhere: vote "
    "sets that differ in one teacher's votes). Adding or removing an example shifts the partition "
    "and can change every teacher: that relation is not covered.")
#: The same for a fine-grained release (`analysis.mechanisms.fine_grained`), where each record is its own teacher.
FINE_GRAINED_RELATION_NOTE = (
    "eps at delta holds for private training sets that differ by replacing one example by "
    "another: each record votes, with its label, for its k nearest public points (a function of "
    "that record and public data alone), so a replacement moves at most 2k cells of the released "
    "histogram by one (analysis.mechanisms.fine_grained, brute-forced in its tests).")


#: What release.json's first figure is when a ledger gave it.
DATA_SET_FIGURE = ("the HEADLINE: the data set's cumulative guarantee, every release recorded in its ledger, this one "
                   "included (data_set says how it was composed); publish this one")


def figure_head(own_eps: float, own_delta: float, data_set: Mapping | None, own_is: str) -> dict:
    """The first keys of every published result file (release.json, dpsgd.json, fedavg.json,
    synth.json): ``eps`` at ``delta``, what the data set has spent in all (``data_set``,
    `pate.store.ledger.Ledger.summary`: every release recorded for it, this one included),
    so a user who publishes the first number never understates it; without a ledger, this
    release's. Then ``release_eps`` at ``release_delta``, this release's own figure, named
    as such (``own_is`` says what it covers)."""
    first = data_set is not None and "eps" in data_set and "delta" in data_set
    return {
        "eps": jsonable(data_set["eps"]) if first else jsonable(own_eps),
        "delta": jsonable(data_set["delta"]) if first else jsonable(own_delta),
        "eps_is": (DATA_SET_FIGURE if first else "this release's eps (no ledger was given, so no headline: it "
                   "covers this release only)"),
        "release_eps": jsonable(own_eps),
        "release_delta": jsonable(own_delta),
        "release_eps_is": own_is,
    }


def release_json(report: PrivacyReport, extra: dict | None = None) -> dict:
    """``release.json``: only publishable values, safe to publish as a whole.

    Its first figure, ``eps`` at ``delta``, is what the data set has spent in all
    (``extra["data_set"]``, `figure_head`); ``release_eps`` at ``release_delta`` is this
    release's own headline (the labels and the sanitised ε, the release's own cost
    included); the other numbers are the mechanism's public parameters and the pieces that
    headline is made of.
    """
    public = {i.key: jsonable(i.value) for i in report.items if i.public}
    if "eps" not in public:
        raise PateError("this report has no headline eps (it was built without a sanitised release)")
    own, own_delta = public.pop("eps"), public.pop("delta_total")
    record = registry.record_type(report.mechanism)
    head = figure_head(own, own_delta, (extra or {}).get("data_set"), "this release's eps (" + (
        "labels and sanitised eps" if record.sanitised else "labels" if record.needs_teachers else
        "one noisy vote histogram") + "), not the headline: NOT what the data set has spent when it has other releases")
    first = head["eps_is"] == DATA_SET_FIGURE  # the data set's figure leads (`pate.store.ledger.Ledger.summary`)
    doc = {
        **head,
        "mechanism": report.mechanism,
        "neighbouring_relation": NEIGHBOURING_RELATION,
        "neighbouring_relation_note": RELATION_NOTE if record.needs_teachers else FINE_GRAINED_RELATION_NOTE,
        "details": public,
        "notes": "Everything here may be published. Publish 'eps' at 'delta' (" + (
            "the headline, the data set's: every release made from it" if first else "this release's") + "); "
                 "'release_eps' at 'release_delta' is this release's eps, the guarantee of this release alone: " + (
                     "the labels and the sanitised eps, its own cost included." if record.sanitised else
                     "the labels (no sanitised eps is released)." if record.needs_teachers else
                     "the one noisy vote histogram every label comes from."),
        "warnings": list(report.warnings),
    }
    if extra:
        doc.update(jsonable(extra))
    return doc


def json_bytes(report: PrivacyReport, extra: dict | None = None) -> bytes:
    return (json.dumps(to_json(report, extra), indent=2, sort_keys=False, allow_nan=False) + "\n").encode()


def release_bytes(report: PrivacyReport, extra: dict | None = None) -> bytes:
    return (json.dumps(release_json(report, extra), indent=2, sort_keys=False, allow_nan=False) + "\n").encode()


def plot_bytes(report: PrivacyReport) -> bytes:
    """PNG of cumulative ε against queries (data-independent and -dependent) and the
    headline ε. The data-dependent curve is private, so the plot is too."""
    if report.curve_queries is None:
        raise PateError("this report has no per-query curve to plot")
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    try:
        ax.plot(report.curve_queries, report.curve_independent, label="data-independent (public)")
        ax.plot(report.curve_queries, report.curve_dependent,
                label="data-dependent (PRIVATE: do not publish)")
        keys = {item.key for item in report.items}
        if "eps" in keys:
            ax.axhline(report.value("eps"), color="k", linestyle="--", linewidth=1,
                       label=f"this release's eps {report.value('eps'):.3g} (labels + sanitised eps)")
        ax.set_xlabel(report.curve_label)
        ax.set_ylabel("ε")
        delta = report.value("delta")
        ax.set_title(f"{report.mechanism}: cumulative ε at δ = {delta:g}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


class StagedOutputs:
    """A report's files written to owner-only temp files beside their targets
    (`stage_outputs`): `commit` puts them all into place, `discard` deletes them."""

    def __init__(self, staged: list[tuple[str, str, bool]]):
        self.staged = staged  # (temp file, target, private)

    def commit(self) -> None:
        """Renames every staged file into place, all or nothing: private files first, each
        file it replaces kept aside until the end, and a public file given its public mode
        (it was owner-only) once it is in place, last. A failure puts every file back as it
        was and deletes the temp files; it raises `CommitFailed` when no public file had
        been opened to others (the release was never out), else a plain `PateError`. A
        rollback that meets an error of its own (a permission, a vanished file) goes on with
        the other renames and is named in the same one line: whether the release was out
        depends on what reached its place, never on whether the rollback succeeded.
        """
        done: list[tuple[str, str]] = []  # renames made, undone in reverse on failure
        kept: list[str] = []  # the files replaced, kept aside until the commit is whole
        opened = False
        try:
            for tmp, path, private in sorted(self.staged, key=lambda s: not s[2]):
                if os.path.lexists(path):
                    aside = os.path.join(os.path.dirname(os.path.abspath(path)),
                                         f".{os.path.basename(path)}.{secrets.token_hex(8)}.old.tmp")
                    os.replace(path, aside)
                    done.append((path, aside))
                    kept.append(aside)
                os.replace(tmp, path)
                done.append((tmp, path))
                if not private:
                    opened = True
                    os.chmod(path, files.public_mode())
        except OSError as err:
            publics = {path for _, path, private in self.staged if not private}
            stuck = files.undo_renames(done)
            with contextlib.suppress(OSError):  # a temp file that cannot go: never the error to report
                self.discard()
            opened = opened or any(dst in publics for _, dst, _ in stuck)  # a new public file left in place
            why = f"cannot put {err.filename or 'a report file'} in place: {err.strerror or err}; " + (
                "nothing was changed" if not stuck else
                f"putting the files back failed too ({files.stuck_line(stuck)}), the rest was put back")
            raise (PateError(why + " (a public file was readable for a moment)") if opened
                   else CommitFailed(why)) from None
        for aside in kept:
            files.unlink_quietly(aside)
        self.staged = []

    def contents(self) -> list[tuple[str, bytes, bool]]:
        """What `commit` would put in place: each (target, bytes, private), for a caller that
        must keep a charged release it could not put in place (`stage_blobs` stages them again)."""
        out = []
        for tmp, path, private in self.staged:
            with open(tmp, "rb") as f:
                out.append((path, f.read(), private))
        return out

    def identity(self, target) -> str | None:
        """``sanitised:`` and the sha256 of the staged file that `commit` puts at ``target``
        (the bytes it publishes): what the ledger knows that release by."""
        import hashlib

        for tmp, path, _ in self.staged:
            if os.path.abspath(path) == os.path.abspath(target):
                with open(tmp, "rb") as f:
                    return "sanitised:" + hashlib.sha256(f.read()).hexdigest()
        return None

    def discard(self) -> None:
        for tmp, _, _ in self.staged:
            files.unlink_quietly(tmp)
        self.staged = []


def stage_outputs(report: PrivacyReport, json_path=None, plot_path=None,
                  extra: dict | None = None, release_path=None) -> StagedOutputs:
    """Renders every requested output and writes each to a synced, owner-only temp file
    beside its target, where a full disk or a read-only folder fails; nothing is at a
    target yet, and a failure leaves no file behind. ``json_path`` (the whole report) and
    ``plot_path`` are private (owner-only); ``release_path`` gets :func:`release_json`,
    made readable when it is committed. A target that is a folder is refused here. A
    caller that must charge the release first charges it between this and
    `StagedOutputs.commit` (renames, which do not run out of space)."""
    blobs = []
    if json_path is not None:
        blobs.append((json_path, json_bytes(report, extra), True))
    if plot_path is not None:
        blobs.append((plot_path, plot_bytes(report), True))
    if release_path is not None:
        blobs.append((release_path, release_bytes(report, extra), False))
    return stage_blobs(blobs)


def stage_blobs(blobs) -> StagedOutputs:
    """`stage_outputs` of rendered files: each (target, bytes, private) written to a synced,
    owner-only temp file beside its target (a missing folder, or a target that is a folder,
    refused first); nothing is at a target yet."""
    for path, _, _ in blobs:
        folder = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(folder):
            raise PateError(f"cannot write {path}: folder {folder} does not exist; create it first")
        if os.path.isdir(path):
            raise PateError(f"cannot write {path}: it is a folder; move it aside (nothing was written)")
    staged = StagedOutputs([])
    try:
        for path, data, private in blobs:
            staged.staged.append((files.write_temp(path, data, True), os.fspath(path), private))
    except BaseException:
        staged.discard()
        raise
    return staged


def write_outputs(report: PrivacyReport, json_path=None, plot_path=None,
                  extra: dict | None = None, release_path=None) -> None:
    """`stage_outputs`, then every file renamed into place: no failure leaves part of
    the outputs."""
    stage_outputs(report, json_path, plot_path, extra, release_path).commit()
