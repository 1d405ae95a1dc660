"""PATE against DP-SGD at the same (eps, delta) under ONE neighbouring relation: one JSON
object per row (accuracy, eps under each relation, wall time), then a Markdown table.

Relations: PATE's eps holds for replace-one neighbours (its partition permutes range(N));
DP-SGD's usual eps (Tramer & Boneh's) for add/remove-one. ``--relation replace-one``
(default) calibrates each DP-SGD model to the target eps *under replace-one*
(``dpsgd.relation``), so every row's ``eps`` is a replace-one eps and the comparison is
like for like; ``--relation add-remove`` trains the literature's setting. Every row
also gives each eps it has: ``eps_replace_one`` and ``eps_add_remove`` (PATE: none, its
partition gives no add/remove guarantee).

Federated rows (``--fedavg fedavg iadmm``): `pate fedavg` at each target eps (total over all
rounds, replace-one by construction) with the config's ``[fedavg]`` settings (``--fedavg-clients
P`` to cut the same shards into P clients), in ``ROOT/fedavg-ALGORITHM-epsE`` (or
``...-pP``); each row also gives the per-round eps that per-round accounting would report.
``--fedavg-config A B`` runs these rows for each config (``ROOT/fedavg-STEM-...`` but for
``--config``'s), e.g. the 500 clients of configs/fashion_mnist.toml beside the 10 silos of
configs/fashion_mnist_silos.toml.

Fine-grained rows (``--fine-grained``): `pate run --config configs/fashion_mnist_fine.toml` at each
target eps (pure, replace-one), in ``ROOT/fine-epsE[-dD]``, with the votes per record and the
smoothing the public proxy chose for that eps (`FINE_SETTINGS`, `bench/fine_grained.py`). One
process computes the scattering transform of each image set once, for these rows and the DP-SGD
ScatterNet rows alike (the product computes it in each run; a row's wall time then leaves it out,
but for the first row that needs it).

Rows per public feature map (``--maps MAP ...``, each as ``[features] map`` names it: ``scattering``,
``learned``, ``learned+scattering``, ...): for each map and target eps, DP-SGD on the map (`pate
dpsgd` with ``dpsgd.model = "linear"``, ``dpsgd.features = MAP``: a linear classifier on each image's
row under the map, `--config`'s ``[dpsgd]`` settings, in ``ROOT/dpsgd-linear-MAP-epsE[-replace-one]``)
and fine-grained PATE on the map (the fine-grained rows above with ``features.map = MAP``, in
``ROOT/fine-MAP-epsE``); ``--map-set SECTION.KEY=VALUE`` sets both, e.g. ``features.weights="DIR"``
for a learned map. Their methods are ``dpsgd-linear-on-MAP`` and ``pate-fine-grained-on-MAP``.
Teacher-head rows on a map come from teachers trained on it: ``pate train-teachers --config
configs/fashion_mnist.toml --workdir T --set teachers.features='"MAP"'`` (its heads are linear;
``--set features.weights='"DIR"'`` for a learned map), then ``--pate-teachers T --pate-target-eps``
gives one row per ``--eps`` and draw (in a ROOT of their own per map: the rows are named by
queries and eps, not by map).

``--draws N`` repeats every DP-SGD, federated and fine-grained row N times (fresh noise each, run directories
``...-dD`` for draws after the first), and the table ends with each method's mean and spread per eps.

DP-SGD rows: `pate dpsgd` for each model and target eps, each in its own run directory
``ROOT/dpsgd-MODEL-epsE`` (add/remove) or ``ROOT/dpsgd-MODEL-epsE-replace-one`` (a row
already there is read, not trained again; `--no-train` reads only). PATE rows: run directories given with `--pate`, and, with
`--pate-teachers RUN`, one row per `--pate-queries N` (with `--pate-target-eps`: one per `--eps` E and
draw, a release planned for a headline of E, ``ROOT/pate-qN-epsE[-dD]``): the teachers of RUN (hard-linked,
not retrained) label N pool points and a student is trained, through the product's own
`pate run` in ``ROOT/pate-qN`` (so a PATE row's wall time is its label + student +
analyze steps; the teachers' own time is added from RUN's teachers.json). PATE rows are
read from public files only (``release.json``'s headline ε, ``student.json``); nothing
private (votes, privacy.json) is opened.

    python bench/compare.py [--config configs/fashion_mnist.toml] [--root runs/compare]
        [--eps 1 2 3] [--models cnn scatternet] [--relation replace-one|add-remove]
        [--fedavg fedavg iadmm] [--fedavg-clients P] [--fedavg-config CONFIG ...]
        [--no-train] [--pate RUN ...]
        [--pate-teachers RUN --pate-queries 300 800 1500] [--fine-grained] [--fine-config F]
        [--fine-set SECTION.KEY=VALUE ...] [--maps MAP ...] [--map-set SECTION.KEY=VALUE ...]
        [--draws N] [--plot compare.png]

Both sides evaluate on the same split: data.public_size onwards of the test split
(``accuracy``); DP-SGD rows also give the whole test split (``accuracy_test``, what
Tramer & Boneh report).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pate.config.checks import FEATURE_MAPS  # noqa: E402  (after the path)

#: Tramer & Boneh (ICLR 2021), Fashion-MNIST at eps = 3, delta = 1e-5 (whole test split).
PUBLISHED = {"cnn": 0.860, "scatternet": 0.897}
FINE_CONFIG = ROOT / "configs" / "fashion_mnist_fine.toml"
#: (votes per record, smoothing, its weights) the public proxy of `bench/fine_grained.py` chose per
#: eps (Laplace; 2026-11-26, docs/journal/2026-11-26-silos-identity-harmonic-smoothing.md).
FINE_SETTINGS = {0.5: (2, 40, "uniform"), 1.0: (1, 40, "harmonic"), 2.0: (2, 20, "harmonic"),
                 3.0: (2, 10, "harmonic")}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _number(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _own_figure(doc: dict) -> tuple[float | None, float | None, float | None]:
    """A result file's own (eps, delta) and the data set's cumulative eps it leads with: files
    since the trust issue lead with the data set's ``eps`` and give their own as
    ``release_eps`` / ``release_delta``; older files have only their own ``eps`` / ``delta``."""
    if "release_eps" in doc:
        return _number(doc["release_eps"]), _number(doc.get("release_delta")), _number(doc.get("eps"))
    return _number(doc.get("eps")), _number(doc.get("delta")), None


def dpsgd_row(workdir: Path) -> dict[str, Any] | None:
    info = _read(workdir / "dpsgd.json")
    if info is None:
        return None
    replace = _number(info.get("eps_replace_one"))
    # The model's own figures: dpsgd.json's first "eps" is its data set's cumulative one; a file
    # written before it led with that had the add/remove figure there.
    add_remove = info["eps_add_remove"] if "eps_add_remove" in info else info["eps"]
    on = f"-on-{info['features_map']}" if info.get("features_map") else ""
    return {
        "method": f"dpsgd-{info['model']}{on}",
        "eps": replace, "relation": "replace-one", "eps_replace_one": replace, "eps_add_remove": add_remove,
        "target_eps": info.get("target_eps"), "target_relation": info.get("target_relation", "add/remove-one"),
        "delta": info["delta"],
        "accuracy": info["accuracy"], "eval_points": info.get("eval_points"),
        "accuracy_test": info.get("accuracy_test"), "test_points": info.get("test_points"),
        "published_accuracy_eps3": PUBLISHED.get(info["model"]),
        "wall_time_s": info.get("wall_time_s"), "noise_multiplier": info["noise_multiplier"],
        "epochs": info["epochs"], "batch_size": info["batch_size"], "accountant": info["accountant"],
        "features_map": info.get("features_map") or None, "workdir": str(workdir),
    }


def fedavg_row(workdir: Path) -> dict[str, Any] | None:
    info = _read(workdir / "fedavg.json")
    if info is None:
        return None
    own, own_delta, _ = _own_figure(info)
    return {
        "method": f"{info['algorithm']}-{info['mechanism']}-{info['model']}-{info['clients']}-clients",
        "eps": own, "relation": info["neighbouring_relation"], "eps_replace_one": own,
        "eps_add_remove": None, "per_round_eps": info["per_round_eps"], "target_eps": info["target_eps"],
        "delta": own_delta, "accuracy": info["accuracy"],
        "eval_points": info["eval_points"], "accuracy_test": info.get("accuracy_test"), "rounds": info["rounds"],
        "clients": info["clients"], "averaged_model_eps": info.get("averaged_model_eps"),
        "wall_time_s": None, "workdir": str(workdir),
    }


def train_fedavg(config_path: str, workdir: Path, algorithm: str, eps: float, clients: int | None) -> None:
    """`pate fedavg` of ``config_path``'s [fedavg] with ``algorithm``, total ``eps`` and, when
    given, ``clients``."""
    from pate.config import load_config
    from pate.baselines.fedavg import train_fedavg as train

    overrides = {"fedavg.algorithm": algorithm, "fedavg.eps": eps}
    if clients:
        overrides["fedavg.clients"] = clients
    print(f"# training {algorithm} at total eps {eps:g} in {workdir}", file=sys.stderr)
    train(load_config(config_path, overrides), workdir, show_progress=False,
          echo=lambda line: print(f"# {line}", file=sys.stderr))


def pate_row(workdir: Path) -> dict[str, Any]:
    """A PATE run's student accuracy and its public eps. The eps is, in this order of
    preference: release.json's ``release_eps`` (this release's own headline: its ``eps`` is the
    data set's cumulative figure, which grows with every other release in the same ledger),
    older files' headline keys, privacy.json's public sanitised eps (plus the release's own
    cost when reported separately), privacy.json's data-independent eps."""
    student = _read(workdir / "student.json") or {}
    privacy = _read(workdir / "privacy.json") or {}
    release = _read(workdir / "release.json") or {}
    teachers = _read(workdir / "teachers.json") or {}
    public = privacy.get("public", {}) if isinstance(privacy.get("public"), dict) else {}
    _, own_delta, data_set_eps = _own_figure(release)
    eps, source = None, None
    for key in ("release_eps", "headline_eps", "published_eps", "eps_published", "eps"):
        if _number(release.get(key)) is not None:
            eps, source = _number(release[key]), f"release.json:{key}"
            break
    if eps is None and _number(public.get("eps_sanitized")) is not None:
        eps, source = _number(public["eps_sanitized"]), "privacy.json:eps_sanitized"
    if eps is None and _number(public.get("eps_data_independent")) is not None:
        eps, source = _number(public["eps_data_independent"]), "privacy.json:eps_data_independent"
    # Two rounds (`pate label --round 2`): release.json's headline is of both rounds, the
    # student of both rounds is student.json, round 1's student (its time counts) is kept.
    rounds = int(student.get("rounds") or 1)
    first = (_read(workdir / "student-round1.json") or {}) if rounds == 2 else {}
    walls = [_number(d.get("wall_time_s")) for d in (teachers, student, first)]
    return {
        "method": f"pate-{student.get('method', 'student')}" + ("-2rounds" if rounds == 2 else ""),
        "eps": eps, "relation": release.get("neighbouring_relation", "replace-one"), "eps_source": source,
        "eps_replace_one": eps, "eps_add_remove": None,
        "eps_release_cost": _number(public.get("eps_release_cost")),
        "delta": _number(public.get("delta")) or own_delta, "data_set_eps": data_set_eps,
        "accuracy": _number(student.get("accuracy")), "eval_points": student.get("eval_points"),
        "wall_time_s": sum(w for w in walls if w is not None) if any(w is not None for w in walls) else None,
        "wall_time_parts": {"teachers": walls[0], "student": walls[1],
                            **({"student_round1": walls[2]} if rounds == 2 else {})},
        "workdir": str(workdir),
    }


def pate_release(config_path: str, teachers_run: Path, workdir: Path, queries: int,
                 target: float | None = None) -> None:
    """Labels `queries` pool points (with `target`: at most that many, planned for a headline of
    `target`) with the teachers of `teachers_run` and trains the student, in `workdir`, with
    `pate run` (the teachers step finds them up to date)."""
    import os
    import shutil

    from pate.config import load_config
    from pate.steps.pipeline import run

    config = load_config(config_path, {"aggregation.queries": queries,
                                       **({} if target is None else {"privacy.target_eps": target})})
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("config.toml", "teachers.json"):
        if not (workdir / name).exists():
            shutil.copy2(teachers_run / name, workdir / name)
    if not (workdir / "teachers").exists():
        shutil.copytree(teachers_run / "teachers", workdir / "teachers", copy_function=os.link)
    print(f"# pate run: {queries} queries in {workdir}", file=sys.stderr)
    run(config, workdir, show_progress=False, echo=lambda line: print(f"# {line}", file=sys.stderr))


def fine_row(workdir: Path, feature_map: str | None = None) -> dict[str, Any] | None:
    """A fine-grained run's student and its release's own (pure) eps, from public files only
    (release.json's ``eps`` is the data set's cumulative figure; older files have only it);
    ``feature_map``: the map of a row of ``--maps`` (its method ``pate-fine-grained-on-MAP``)."""
    student, release = _read(workdir / "student.json"), _read(workdir / "release.json")
    if student is None or release is None:
        return None
    details = release.get("details") or {}
    own, own_delta, data_set_eps = _own_figure(release)
    return {
        "method": "pate-fine-grained" + (f"-on-{feature_map}" if feature_map else ""), "eps": own, "relation": release.get("neighbouring_relation"),
        "eps_replace_one": own, "eps_add_remove": None, "delta": own_delta, "data_set_eps": data_set_eps,
        "accuracy": _number(student.get("accuracy")), "eval_points": student.get("eval_points"),
        "labelled": details.get("labelled_points"), "votes_per_record": details.get("votes_per_record"),
        "smoothing": details.get("smoothing"), "wall_time_s": None, "features_map": feature_map,
        "workdir": str(workdir),
    }


def _cache_scattering() -> None:
    """The scattering transform of the same images computed once in this process, for every
    fine-grained and DP-SGD ScatterNet row (each run directory would compute it again)."""
    import hashlib

    import numpy as np

    from pate.programs import scattering

    real, memo = scattering.scatter, {}

    def cached(images, J=2, L=8, batch_size=1000, **how):  # how: the error's section, a progress label
        images = np.ascontiguousarray(images, np.float32)
        key = (J, L, hashlib.sha256(images.tobytes()).hexdigest())
        if key not in memo:
            memo[key] = real(images, J, L, batch_size, **how)
        return memo[key]

    scattering.scatter = cached


def _cache_maps(folder: Path) -> None:
    """The HOG and Coates-Ng rows of the same images computed once for every row of this process:
    each map's own cache (keyed by a digest of the images and the map's settings or filters) in one
    owner-only folder of the compare root, not in each run directory. The rows are features of
    private images: the folder is as private as the runs."""
    from pate.programs import coates_ng, hog

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    real_hog, real_cng = hog.features, coates_ng.features
    hog.features = lambda images, settings=hog.Settings(), cache_dir=None, name="": real_hog(
        images, settings, folder, name or "rows")
    coates_ng.features = lambda filters, images, cache_dir=None, name="", progress="": real_cng(
        filters, images, folder, name or "rows", progress)


def train_fine(workdir: Path, eps: float, config_path=FINE_CONFIG, settings: dict | None = None) -> None:
    """`pate run` of the fine-grained config at ``eps`` with the proxy's (k, smoothing, weights)
    for that eps, then ``settings`` (``section.key`` -> TOML value, e.g. the student's steps)."""
    from pate.config import load_config
    from pate.steps.pipeline import run

    k, m, weights = FINE_SETTINGS.get(eps, (1, 40, "harmonic"))
    config = load_config(config_path, {"fine_grained.eps": eps, "fine_grained.votes_per_record": k,
                                       "fine_grained.smoothing": m, "fine_grained.smoothing_weights": weights,
                                       **(settings or {})})
    print(f"# fine-grained at eps {eps:g} (k {k}, smoothing {m}, {weights}) in {workdir}", file=sys.stderr)
    run(config, workdir, show_progress=False, echo=lambda line: print(f"# {line}", file=sys.stderr))


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each method's accuracy over its draws at each target eps: mean, sample std, min, max."""
    import statistics

    groups: dict[tuple, list] = {}
    for r in rows:
        target = r.get("target_eps") if r.get("target_eps") is not None else r.get("eps")
        if r.get("accuracy") is not None and target is not None:
            groups.setdefault((r["method"], round(float(target), 3)), []).append(r)
    out = []
    for (method, target), rs in sorted(groups.items()):
        acc = [r["accuracy"] for r in rs]
        walls = [r["wall_time_s"] for r in rs if r.get("wall_time_s") is not None]
        out.append({"method": method, "target_eps": target, "draws": len(acc), "mean": statistics.fmean(acc),
                    "std": statistics.stdev(acc) if len(acc) > 1 else 0.0, "min": min(acc), "max": max(acc),
                    "eps_replace_one": statistics.fmean(r["eps_replace_one"] for r in rs),
                    "wall_time_s": statistics.fmean(walls) if walls else None})
    return out


def summary_table(groups: list[dict[str, Any]]) -> str:
    lines = ["| method | target eps | eps, replace-one (mean) | draws | accuracy mean ± std [min, max] | wall time (s) |",
             "|---|---|---|---|---|---|"]
    for g in groups:
        wall = "-" if g["wall_time_s"] is None else f"{g['wall_time_s']:.0f}"
        lines.append(f"| {g['method']} | {g['target_eps']:g} | {g['eps_replace_one']:.2f} | {g['draws']} | "
                     f"{g['mean']:.4f} ± {g['std']:.4f} [{g['min']:.4f}, {g['max']:.4f}] | {wall} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Accuracy (evaluation split) against ε, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    methods = sorted({r["method"] for r in rows})
    for method in methods:
        pts = sorted((r["eps"], r["accuracy"]) for r in rows
                     if r["method"] == method and r["eps"] is not None and r["accuracy"] is not None)
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label=method)
    ax.set_xlabel("published ε, replace-one neighbours (δ = 1e-5)")
    ax.set_ylabel("accuracy (evaluation split)")
    ax.set_title("Fashion-MNIST: PATE student vs DP-SGD")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train(config_path: str, workdir: Path, model: str, eps: float, relation: str, feature_map: str = "",
          settings: dict | None = None) -> None:
    """`pate dpsgd` of ``config_path`` with ``model`` at target ``eps`` under ``relation``; with
    ``feature_map``, a linear model on the rows of that public map (``dpsgd.features``), then
    ``settings`` (``section.key`` -> TOML value, e.g. ``features.weights``)."""
    from pate.config import load_config
    from pate.baselines.dpsgd import train_dpsgd

    config = load_config(config_path, {"dpsgd.model": model, "dpsgd.eps": eps, "dpsgd.relation": relation,
                                       **({"dpsgd.features": feature_map} if feature_map else {}),
                                       **(settings or {})})
    on = f" on the map {feature_map}" if feature_map else ""
    print(f"# training dpsgd {model}{on} at eps {eps:g} ({relation}) in {workdir}", file=sys.stderr)
    train_dpsgd(config, workdir, show_progress=False, echo=lambda s: print(f"# {s}", file=sys.stderr))


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| method | eps, replace-one | eps, add/remove-one | accuracy (eval split) | accuracy (whole test) "
             "| wall time (s) |", "|---|---|---|---|---|---|"]

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    for r in rows:
        lines.append(f"| {r['method']} | {fmt(r['eps_replace_one'], '.2f')} | {fmt(r['eps_add_remove'], '.2f')} | "
                     f"{fmt(r['accuracy'], '.4f')} | "
                     f"{fmt(r.get('accuracy_test'), '.4f')} | {fmt(r['wall_time_s'], '.0f')} |")
    return "\n".join(lines)


def _read_or_train(workdir: Path, read, no_train: bool, train_it, what: str) -> list[dict[str, Any]]:
    """The row of `workdir` (read), trained first when missing unless `no_train`."""
    row = read(workdir)
    if row is None and not no_train:
        start = time.time()
        train_it(workdir)
        row = read(workdir)
        if row is not None and row.get("wall_time_s") is None:  # trained here: its wall time, data loading included
            row["wall_time_s"] = time.time() - start
    if row is None:
        print(f"# no {what} result in {workdir} (run without --no-train)", file=sys.stderr)
        return []
    return [row]


def check_args(args) -> str | None:
    """What is wrong with the arguments, in one line, or None: every eps finite, positive and at
    most 1000 (as `pate`'s options); at least one draw; client and query counts at least 1; every
    --pate a run directory that holds a release, each named once."""
    bad = [e for e in args.eps if not (math.isfinite(e) and 0 < e <= 1000)]
    if bad:
        return f"--eps must be finite, positive and at most 1000, got {bad[0]:g}"
    if args.draws < 1:
        return f"--draws must be at least 1, got {args.draws}"
    if args.fedavg_clients is not None and args.fedavg_clients < 1:
        return f"--fedavg-clients must be at least 1, got {args.fedavg_clients}"
    if any(q < 1 for q in args.pate_queries):
        return "--pate-queries must all be at least 1"
    for feature_map in getattr(args, "maps", None) or []:
        names = feature_map.split("+")
        if not all(n in FEATURE_MAPS for n in names) or len(set(names)) != len(names):
            return (f"--maps {feature_map}: a map is one of {', '.join(FEATURE_MAPS)} or several joined by \"+\" "
                    "(each once)")
    if len(set(getattr(args, "maps", None) or [])) != len(getattr(args, "maps", None) or []):
        return "--maps names a map twice"
    if getattr(args, "pate_target_eps", False) and not getattr(args, "pate_teachers", None):
        return "--pate-target-eps needs --pate-teachers RUN (the teachers whose releases are planned)"
    seen = set()
    for path in args.pate:
        run = Path(path)
        if not (run / "release.json").is_file():
            return f"--pate {path}: no release.json there (give a PATE run directory `pate run` finished)"
        if run.resolve() in seen:
            return f"--pate {path} is given twice"
        seen.add(run.resolve())
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    parser.add_argument("--root", default=str(ROOT / "runs" / "compare"),
                        help="where the DP-SGD run directories live (dpsgd-MODEL-epsE)")
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--models", nargs="*", choices=["cnn", "scatternet"], default=["cnn", "scatternet"],
                        help="DP-SGD models (none: PATE rows only)")
    parser.add_argument("--relation", choices=["replace-one", "add-remove"], default="replace-one",
                        help="the relation DP-SGD's target eps holds for (replace-one: PATE's)")
    parser.add_argument("--fedavg", nargs="*", choices=["fedavg", "iadmm"], default=[],
                        help="federated rows (pate fedavg) at each --eps, total over all rounds")
    parser.add_argument("--fedavg-clients", type=int, default=None,
                        help="clients for the federated rows (default: the config's, i.e. the teachers' shards)")
    parser.add_argument("--no-train", action="store_true", help="read existing DP-SGD rows only")
    parser.add_argument("--pate", nargs="*", action="extend", default=[],
                        help="PATE run directories to read (repeat the option or list several)")
    parser.add_argument("--pate-teachers", default=None,
                        help="a run with trained teachers: release --pate-queries settings from them")
    parser.add_argument("--pate-queries", type=int, nargs="+", default=[300, 800, 1500],
                        help="Confident-GNMax query counts, one PATE row each (with --pate-teachers)")
    parser.add_argument("--pate-target-eps", action="store_true",
                        help="with --pate-teachers: one row per --eps and draw instead, each a release planned for "
                             "that headline ([privacy] target_eps; at most the first --pate-queries value)")
    parser.add_argument("--fine-grained", action="store_true",
                        help="fine-grained rows (configs/fashion_mnist_fine.toml) at each --eps")
    parser.add_argument("--fedavg-config", nargs="+", default=None, metavar="CONFIG",
                        help="the federated rows' configs (default: --config), e.g. configs/fashion_mnist.toml "
                             "configs/fashion_mnist_silos.toml for 500 clients and 10 silos side by side")
    parser.add_argument("--fine-config", default=str(FINE_CONFIG),
                        help="the fine-grained rows' config (e.g. configs/fashion_mnist_fine_gpu.toml)")
    parser.add_argument("--fine-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override of the fine-grained rows' config (TOML value), repeatable")
    parser.add_argument("--maps", nargs="+", default=[], metavar="MAP",
                        help="rows per public feature map at each --eps: DP-SGD on the map (a linear model, "
                             "dpsgd.features = MAP) and fine-grained PATE on it (features.map = MAP)")
    parser.add_argument("--map-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override of the --maps rows' configs (both kinds; TOML value), repeatable, e.g. "
                             "features.weights='\"DIR\"' for a learned map")
    parser.add_argument("--draws", type=int, default=1,
                        help="noise draws of every DP-SGD, federated and fine-grained row")
    parser.add_argument("--plot", default=None, help="write accuracy against eps to this PNG")
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem:
        parser.exit(2, f"compare.py: {problem}\n")

    start = time.time()
    rows = []
    suffix = "-replace-one" if args.relation == "replace-one" else ""
    draws = [""] + [f"-d{d}" for d in range(2, args.draws + 1)]
    _cache_scattering()
    _cache_maps(Path(args.root) / "map-cache")
    from pate.config import parse_override

    fine_settings = dict(parse_override(item) for item in args.fine_set)
    map_settings = dict(parse_override(item) for item in args.map_set)
    if args.fine_grained:
        for eps in args.eps:
            for draw in draws:
                rows += _read_or_train(Path(args.root) / f"fine-eps{eps:g}{draw}", fine_row, args.no_train,
                                       lambda w: train_fine(w, eps, args.fine_config, fine_settings),
                                       "fine-grained")
    for model in args.models:
        for eps in args.eps:
            for draw in draws:
                rows += _read_or_train(Path(args.root) / f"dpsgd-{model}-eps{eps:g}{suffix}{draw}", dpsgd_row,
                                       args.no_train, lambda w: train(args.config, w, model, eps, args.relation),
                                       "DP-SGD")
    for feature_map in args.maps:
        for eps in args.eps:
            for draw in draws:
                rows += _read_or_train(
                    Path(args.root) / f"fine-{feature_map}-eps{eps:g}{draw}",
                    lambda w: fine_row(w, feature_map), args.no_train,
                    lambda w: train_fine(w, eps, args.fine_config,
                                         {**fine_settings, "features.map": feature_map, **map_settings}),
                    "fine-grained")
                rows += _read_or_train(
                    Path(args.root) / f"dpsgd-linear-{feature_map}-eps{eps:g}{suffix}{draw}", dpsgd_row, args.no_train,
                    lambda w: train(args.config, w, "linear", eps, args.relation, feature_map, map_settings),
                    "DP-SGD")
    clients = f"-p{args.fedavg_clients}" if args.fedavg_clients else ""
    for fed_config in args.fedavg_config or [args.config]:
        stem = "" if fed_config == args.config else f"{Path(fed_config).stem}-"
        for algorithm in args.fedavg:
            for eps in args.eps:
                for draw in draws:
                    rows += _read_or_train(
                        Path(args.root) / f"fedavg-{stem}{algorithm}-eps{eps:g}{clients}{draw}", fedavg_row,
                        args.no_train,
                        lambda w: train_fedavg(fed_config, w, algorithm, eps, args.fedavg_clients), "federated")
    for path in args.pate:
        rows.append(pate_row(Path(path)))
    if args.pate_teachers:
        teachers_run = Path(args.pate_teachers)
        teachers_wall = _number((_read(teachers_run / "teachers.json") or {}).get("wall_time_s"))
        # (queries, target eps, draw suffix): fixed query counts, or releases planned for each --eps
        settings = ([(args.pate_queries[0], eps, draw) for eps in args.eps for draw in draws] if args.pate_target_eps
                    else [(queries, None, "") for queries in args.pate_queries])
        for queries, target, draw in settings:
            workdir = Path(args.root) / (f"pate-q{queries}" + ("" if target is None else f"-eps{target:g}") + draw)
            if not (workdir / "release.json").exists() or not (workdir / "student.json").exists():
                if args.no_train:
                    print(f"# no PATE result in {workdir} (run without --no-train)", file=sys.stderr)
                    continue
                pate_release(args.config, teachers_run, workdir, queries, target)
            row = pate_row(workdir)
            row["queries"] = queries
            if target is not None:
                row["target_eps"] = target
            row["wall_time_parts"]["teachers"] = teachers_wall
            if teachers_wall is not None and row["wall_time_parts"]["student"] is not None:
                row["wall_time_s"] = teachers_wall + row["wall_time_parts"]["student"]
            rows.append(row)
    groups = summary(rows)
    for row in rows:
        print(json.dumps(row))
    for group in groups:
        print(json.dumps({"summary_of": group["method"], **group}))
    print(json.dumps({"summary": "compare", "rows": len(rows), "wall_time_s": time.time() - start}))
    print(table(rows), file=sys.stderr)
    print(summary_table(groups), file=sys.stderr)
    if args.plot:
        plot(rows, args.plot)
        print(f"# wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
