"""`pate analyze --workdir`: the privacy report of a labelled run directory.

Reads the private ``votes.npz`` and the released ``labels.npz`` (which queries were
answered, by which mechanism and noise) and writes ``privacy.json`` (values marked
public / private) and ``privacy.png``. Uses only `analysis` (no JAX).
"""

from __future__ import annotations

import os
import zipfile

import numpy as np

from analysis import report as report_mod
from analysis import votes as votes_mod
from analysis.errors import PateError

VOTES_FILE = "votes.npz"
LABELS_FILE = "labels.npz"
PRIVACY_JSON = "privacy.json"
PRIVACY_PLOT = "privacy.png"


def read_labels(path: str) -> dict:
    """Reads a released ``labels.npz``: ``indices``, ``labels`` (-1 = unanswered) and the
    mechanism with its parameters, as a plain dict of numpy values."""
    if not os.path.exists(path):
        raise PateError(f"{path} does not exist; run `pate label --workdir {os.path.dirname(path) or '.'}` first")
    try:
        with np.load(path, allow_pickle=False) as data:
            out = {k: data[k] for k in data.keys()}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PateError(f"cannot read {path}: {err}; re-run `pate label --overwrite`") from None
    for key in ("indices", "labels", "mechanism"):
        if key not in out:
            raise PateError(f"{path} has no '{key}' array; it was not written by `pate label`")
    if out["indices"].shape != out["labels"].shape or out["indices"].ndim != 1:
        raise PateError(f"{path}: 'indices' and 'labels' must be 1-d arrays of one length")
    out["mechanism"] = str(out["mechanism"])
    return out


def analyze_workdir(workdir, *, delta: float, moments: int = 8, beta: float = 0.09,
                    seed: int | None = None, gamma: float | None = None,
                    json_path=None, plot_path=None, echo=print) -> report_mod.PrivacyReport:
    """Builds the privacy report of a labelled run and writes privacy.json / privacy.png.

    Args:
      workdir: the run directory.
      delta: δ of the report.
      moments: moments accountant orders 1..moments (LNMax).
      beta: smoothness of the smooth-sensitivity release.
      seed: seed of the release noise (never written out); OS entropy when None.
      gamma: must match the γ in labels.npz when given (a guard against mix-ups).
      json_path, plot_path: where to write; default ``workdir/privacy.json`` and
        ``workdir/privacy.png``.
      echo: where the table goes.
    """
    workdir = os.fspath(workdir)
    if not os.path.isdir(workdir):
        raise PateError(f"run directory {workdir} does not exist")
    labels = read_labels(os.path.join(workdir, LABELS_FILE))
    votes = votes_mod.load_votes(os.path.join(workdir, VOTES_FILE))
    indices = votes_mod.check_indices(labels["indices"], votes.shape[0], name=LABELS_FILE)
    answered = indices[labels["labels"] >= 0]
    if answered.size == 0:
        raise PateError(f"{LABELS_FILE} answers no query; there is nothing to analyse")
    mechanism = labels["mechanism"]
    rng = np.random.default_rng(seed)
    if mechanism == "lnmax":
        run_gamma = float(labels["gamma"])
        if gamma is not None and not np.isclose(gamma, run_gamma):
            raise PateError(f"--gamma {gamma} differs from the gamma {run_gamma} the run was labelled with")
        rep = report_mod.lnmax_report(votes[answered], run_gamma, delta, range(1, moments + 1), beta, rng=rng)
    else:
        raise PateError(f"{LABELS_FILE} names mechanism '{mechanism}', which `pate analyze` does not know")
    json_path = os.path.join(workdir, PRIVACY_JSON) if json_path is None else json_path
    plot_path = os.path.join(workdir, PRIVACY_PLOT) if plot_path is None else plot_path
    report_mod.write_outputs(rep, json_path, plot_path)
    echo(report_mod.render_table(rep))
    echo(f"wrote {json_path} and {plot_path}")
    return rep
