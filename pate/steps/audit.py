"""`pate audit`: an empirical lower bound on ε for a mechanism record, beside its claim.

Runs the project's own aggregator (`pate.release.aggregation.run` on `analysis.core.noise` samplers,
exactly what `pate label` releases with) many times on the neighbouring vote histograms
of `analysis.reporting.empirical_eps.candidate_pairs`, each query repeated ``queries`` times, counts the
output events and hands them to `analysis.reporting.empirical_eps.audit` (Clopper–Pearson, the ε bound).
The claim is the record's tightest data-independent ε for the same number of queries at
the same δ (replace-one).

**Not a release.** The audit reads no private data — the histograms are made up, the
mechanism and its noise are public — so nothing here is charged to a ledger, and its
JSON output may be published. A run directory is only read (its labels.npz record and
config.toml), never written or locked.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from analysis.reporting import empirical_eps as stats
from analysis.mechanisms import fine_grained
from analysis.mechanisms import registry
from analysis.mechanisms.record import Mechanism
from analysis.core.errors import OptionError, PateError
from analysis.core.noise import check_seed
from analysis.core.files import write_atomic
from pate.release import aggregation
from pate.store import rundir
from pate.config import PrivacyConfig, config_file, load_config
from pate.release import fine_grained_release as fine_release
from pate.release.labels import read_labels
from pate.release.privacy_report import check_outputs

#: Vote counts per call of the aggregator (rows x classes): bounds the memory of one batch.
CHUNK_COUNTS = 1 << 21
#: Noise draws (2 sides x pairs x trials x queries x noise coordinates) beyond which an
#: audit would run for hours: refused.
MAX_DRAWS = 2 * 10**10


@dataclasses.dataclass(frozen=True)
class Audit:
    """What `pate audit` measured (see `analysis.reporting.empirical_eps.Bound`) and what was claimed."""

    record: Mechanism
    num_teachers: int
    num_classes: int
    queries: int
    bound: stats.Bound
    claimed: float
    accountant: str
    pairs: tuple[stats.Pair, ...]
    seconds: float
    research_seed: bool

    def to_json(self) -> dict:
        b = self.bound
        return {
            "mechanism": self.record.name, "parameters": self.record.params(), "num_teachers": self.num_teachers,
            "num_classes": self.num_classes, "queries": self.queries, "trials_per_side": b.trials,
            "confidence": b.confidence, "delta": b.delta, "neighbouring_relation": "replace-one",
            "eps_lower_bound": b.eps, "eps_claimed": self.claimed, "claimed_by": self.accountant,
            "violation": b.eps > self.claimed, "events_tested": b.events,
            "best": None if b.pair is None else {
                "pair": self.pairs[b.pair].what, "event": b.event, "direction": b.direction,
                "rates": list(b.rates), "clopper_pearson": list(b.bounds)},
            "pairs": [{"pair": p.what, "n": p.n.tolist(), "n_prime": p.n_prime.tolist(), "eps_lower_bound": e}
                      for p, e in zip(self.pairs, b.per_pair)],
            "seconds": round(self.seconds, 2), "research_seed": self.research_seed,
            "note": "an audit, not a release: no private data read, nothing charged to a ledger"}

    def render(self) -> str:
        b = self.bound
        lines = [f"pate audit: {self.record.describe()}, {self.num_teachers} teachers, {self.num_classes} classes, "
                 f"{self.queries} quer{'y' if self.queries == 1 else 'ies'} per trial",
                 f"{b.trials} trials per histogram, {len(self.pairs)} neighbouring pairs (one teacher's vote "
                 f"moved), {b.events} events, confidence {b.confidence:g}, delta {b.delta:.3g}", "",
                 f"  {'pair n -> n' + chr(39):<62} {'eps lower bound':>15}"]
        lines += [f"  {p.what[:62]:<62} {e:>15.4f}" for p, e in zip(self.pairs, b.per_pair)]
        lines += ["", f"  eps lower bound (empirical)   {b.eps:.4f}",
                  f"  eps claimed                   {self.claimed:.4f}   ({self.accountant}, replace-one)"]
        if b.pair is not None:
            lines.append(f"  from event '{b.event}' ({b.direction}) on pair {b.pair + 1}: rates "
                         f"{b.rates[0]:.4g} vs {b.rates[1]:.4g}, bounds {b.bounds[0]:.4g} / {b.bounds[1]:.4g}")
        verdict = ("VIOLATION: the implementation leaks more than its analysis claims" if b.eps > self.claimed
                   else "no violation found (a lower bound at or below the claim)")
        lines += [f"  {verdict}", f"  ({self.seconds:.1f} s; an audit reads no private data and is not "
                  "charged to any ledger)"]
        return "\n".join(lines)


def _side(record, row: np.ndarray, trials: int, queries: int, names, source) -> np.ndarray:
    """The count histogram (`analysis.reporting.empirical_eps.count_histogram`) of ``trials`` runs of
    ``queries`` queries of the aggregator on the histogram ``row``."""
    hist = np.zeros((len(names), queries + 1), dtype=np.int64)
    per_chunk = max(1, CHUNK_COUNTS // (queries * row.size))
    done = 0
    while done < trials:
        t = min(per_chunk, trials - done)
        votes = np.broadcast_to(row, (t * queries, row.size))
        labels = aggregation.run(votes, record, source).reshape(t, queries)
        hist += stats.count_histogram(stats.categorise(labels, names), len(names))
        done += t
    return hist


def run_audit(record: Mechanism, *, num_teachers: int, num_classes: int, queries: int = 1,
              trials: int = 100_000, confidence: float = 0.95, delta: float = 1e-5, seed: int | None = None) -> Audit:
    """Audits ``record``: ``trials`` runs of ``queries`` queries of the aggregator on each
    side of every candidate pair, the ε lower bound at ``confidence`` and the claim at
    ``delta`` (module docstring). ``seed``: research only (reproducible noise)."""
    if int(queries) < 1 or int(trials) < 1:
        raise PateError(f"queries and trials must be at least 1, got {queries} and {trials}")
    queries, trials = int(queries), int(trials)
    start = time.perf_counter()
    pairs = stats.candidate_pairs(record, num_teachers, num_classes)
    draws = 2 * len(pairs) * trials * queries * (int(num_classes) + 1)
    if draws > MAX_DRAWS:
        raise OptionError("--trials", f"{trials} trials x {queries} queries x {len(pairs)} pairs x 2 sides x "
                          f"{num_classes + 1} noise coordinates is over {MAX_DRAWS:.0e} noise draws (hours); "
                          "use fewer trials or queries")
    claimed, accountant = stats.claimed_eps(record, queries, delta)
    names = stats.categories(record, num_classes)
    source = aggregation.noise_source(check_seed(seed))
    histograms = [(_side(record, p.n, trials, queries, names, source),
                   _side(record, p.n_prime, trials, queries, names, source)) for p in pairs]
    bound = stats.audit(histograms, trials, stats.audit_delta(record, queries, num_classes, delta, claimed),
                        confidence, names)
    return Audit(record, int(num_teachers), int(num_classes), queries, dataclasses.replace(bound, delta=delta),
                 claimed, accountant, pairs, time.perf_counter() - start, seed is not None)


@dataclasses.dataclass(frozen=True)
class FineGrainedAudit:
    """What `pate audit` measured of a fine-grained release's noise, and what was claimed."""

    noise: fine_grained.Noise
    bound: stats.Bound
    claimed: float
    seconds: float
    research_seed: bool

    def to_json(self) -> dict:
        b = self.bound
        return {
            "mechanism": fine_grained.FineGrained.name, "parameters": {"noise": self.noise.kind, "parameter": str(self.noise.parameter),
                                                        "votes_per_record": self.noise.votes},
            "trials_per_side": b.trials, "confidence": b.confidence, "delta": b.delta,
            "neighbouring_relation": "replace-one", "eps_lower_bound": b.eps, "eps_claimed": self.claimed,
            "violation": b.eps > self.claimed, "events_tested": b.events,
            "best": None if b.pair is None else {"event": b.event, "direction": b.direction, "rates": list(b.rates),
                                                  "clopper_pearson": list(b.bounds)},
            "seconds": round(self.seconds, 2), "research_seed": self.research_seed,
            "note": "an audit, not a release: no private data read, nothing charged to a ledger"}

    def render(self) -> str:
        b = self.bound
        verdict = ("VIOLATION: the implementation leaks more than its analysis claims" if b.eps > self.claimed
                   else "no violation found (a lower bound at or below the claim)")
        return "\n".join([
            f"pate audit: fine-grained release, {self.noise.kind} noise {self.noise.parameter}, "
            f"{self.noise.votes} vote(s) per record",
            f"{b.trials} releases of each of two replace-one neighbours ({2 * self.noise.votes} cells moved), "
            f"{b.events} events, confidence {b.confidence:g}, delta {b.delta:.3g}", "",
            f"  eps lower bound (empirical)   {b.eps:.4f}",
            f"  eps claimed                   {self.claimed:.4f}   (replace-one)",
            f"  {verdict}",
            f"  ({self.seconds:.1f} s; an audit reads no private data and is not charged to any ledger)"])


def run_fine_grained_audit(noise: fine_grained.Noise, *, trials: int = 100_000, confidence: float = 0.95,
                           delta: float = 1e-5, seed: int | None = None,
                           claimed: float | None = None) -> FineGrainedAudit:
    """Audits a fine-grained release's noise: ``trials`` releases (`analysis.mechanisms.fine_grained.release`,
    the product's one noise call) of each side of `analysis.mechanisms.fine_grained.audit_pair`, sorted
    into `audit_categories`, and the Clopper–Pearson ε lower bound (`analysis.reporting.empirical_eps.audit`).
    The claim is ``noise.eps(delta)`` unless ``claimed`` is given (to show that too little noise
    for a claim is caught). δ is 0 for the exact discrete Laplace."""
    if int(trials) < 1:
        raise PateError(f"trials must be at least 1, got {trials}")
    start = time.perf_counter()
    trials = int(trials)
    delta = 0.0 if noise.kind == "laplace" else float(delta)
    claimed = noise.eps(delta or None) if claimed is None else float(claimed)
    source = aggregation.noise_source(check_seed(seed))
    c, c_prime = fine_grained.audit_pair(noise.votes)
    names = fine_grained.AUDIT_CATEGORIES

    def side(counts):
        released = fine_grained.release(np.tile(counts, (trials, 1)), noise, source).reshape(trials, *counts.shape)
        return stats.count_histogram(fine_grained.audit_categories(released, noise.votes)[:, None], len(names))

    bound = stats.audit([(side(c), side(c_prime))], trials, delta, confidence, names)
    return FineGrainedAudit(noise, bound, claimed, time.perf_counter() - start, seed is not None)


# --------------------------------------------------------------------------- the command


def _classes_of(config) -> int | None:
    """The number of classes a config's data set has, from its public description (its format
    record's `classes`: an ``npz`` data set is not opened, the audit reads no data)."""
    from pate.data import format_of

    return format_of(config.data.name).classes(config.data)


def _classes_of_run(workdir) -> int | None:
    """The number of classes a run's teachers were trained for (its ``teachers.json``, public
    metadata): what an ``npz`` data set's config does not say."""
    try:
        return int(json.loads((Path(workdir) / rundir.TEACHERS_JSON).read_text())["num_classes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _config_record(config_path, mechanism, noise: dict):
    """The `[aggregation]` record of a config, with --mechanism and the noise options on top."""
    overrides = {f"aggregation.{k}": v for k, v in dict(mechanism=mechanism, **noise).items() if v is not None}
    config = load_config(config_path, overrides)
    effective = config.aggregation.mechanism
    takes = registry.record_type(effective).option_names()  # the others are refused, as by `pate label`
    stray = ["--" + k.replace("_", "-") for k, v in noise.items() if v is not None and k not in takes]
    if stray:
        raise OptionError(stray[0], f"{', '.join(stray)} do not apply to the mechanism {effective}; drop them "
                          "or pick the mechanism they belong to with --mechanism")
    return registry.from_config(config.aggregation), config


def _record_from_run(workdir, mechanism, noise: dict):
    """The record a run directory's labels.npz released with, and the run's config (or None)."""
    if mechanism is not None or any(v is not None for v in noise.values()):
        raise OptionError("--workdir", "with --workdir the mechanism and its noise come from the run's labels.npz; "
                          "drop --mechanism/--gamma/--sigma/--threshold/--sigma-threshold")
    path = Path(workdir) / rundir.LABELS_NPZ
    return registry.from_arrays(read_labels(path), str(path)), rundir.RunDir(workdir).stored_config()


def resolve(*, config_path=None, workdir=None, mechanism=None, noise: dict | None = None, teachers=None,
            num_classes=None, delta=None):
    """``(record, teachers, classes, delta, inputs)`` of `pate audit`: the mechanism from a
    run's labels.npz (``workdir``), a config's ``[aggregation]`` (``config_path``, with the
    options on top) or the options alone; teachers, classes and δ from the options, else
    the config (the run's config.toml), else δ's default. Bad or missing options raise
    `OptionError` (exit 2)."""
    noise = {k: None for k in ("gamma", "sigma", "threshold", "sigma_threshold")} | dict(noise or {})
    if config_path is not None and workdir is not None:
        raise OptionError("--workdir", "give --config or --workdir, not both")
    if workdir is not None:
        record, config = _record_from_run(workdir, mechanism, noise)
        inputs = [Path(workdir) / rundir.LABELS_NPZ]
    elif config_path is not None:
        record, config = _config_record(config_path, mechanism, noise)
        inputs = [config_file(config_path)]  # a bundled config's name: its file
    else:
        if mechanism is None:
            raise OptionError("--mechanism", "give the mechanism to audit: --mechanism with its noise, "
                              "--config FILE or --workdir RUN")
        try:
            record = registry.from_options(mechanism, **noise)
        except PateError as err:
            raise OptionError("--mechanism", str(err)) from None
        config, inputs = None, []
    teachers = teachers if teachers is not None else (None if config is None else config.teachers.num_teachers)
    classes = num_classes if num_classes is not None else (None if config is None else _classes_of(config))
    if classes is None and workdir is not None:
        classes = _classes_of_run(workdir)
    if teachers is None:
        raise OptionError("--teachers", "give the number of teachers (no config says it)")
    if classes is None:
        raise OptionError("--num-classes", "give the number of classes (no config says it)")
    if delta is None:
        delta = (config.privacy if config is not None else PrivacyConfig()).delta
    return record, int(teachers), int(classes), float(delta), inputs


def _fine_grained_noise(sources: dict):
    """``(noise, delta, inputs)`` when `pate audit`'s config or run is a fine-grained one, else
    None. Its noise comes from the config's ``[fine_grained]`` or the run's labels.npz; the
    options of a teachers' mechanism do not apply."""
    config_path, workdir = sources.get("config_path"), sources.get("workdir")
    if config_path is None and workdir is None:
        return None
    if config_path is not None and workdir is not None:
        raise OptionError("--workdir", "give --config or --workdir, not both")
    if workdir is not None:
        path = Path(workdir) / rundir.LABELS_NPZ
        if not path.is_file():
            return None  # the teachers' path says what is missing
        labels = read_labels(path)
        record = registry.from_arrays(labels, str(path))
        if record.needs_teachers:
            return None
        config = rundir.RunDir(workdir).own_config()
        delta = sources.get("delta") or (config.privacy.delta if config is not None else PrivacyConfig().delta)
        return record.noise, float(delta), [path]
    config = load_config(config_path)
    if registry.record_type(config.aggregation.mechanism).needs_teachers:
        return None
    given = [k for k in ("mechanism", "teachers", "num_classes") if sources.get(k) is not None]
    given += [k for k, v in (sources.get("noise") or {}).items() if v is not None]
    if given:
        raise OptionError("--" + given[0].replace("_", "-"), "does not apply to a fine-grained config: its noise is "
                          "[fine_grained]'s")
    delta = sources.get("delta") or config.privacy.delta
    if not config.fine_grained.votes_per_record:
        raise OptionError("--config", "fine_grained.votes_per_record = 0 is chosen on the public proxy when the "
                          "release is drawn: audit the run (--workdir), or set it")
    return fine_release.noise_of(config.fine_grained, delta), float(delta), [config_file(config_path)]


def audit_command(*, json_path=None, queries: int = 1, trials: int = 100_000, confidence: float = 0.95,
                  seed=None, **sources) -> Audit:
    """`pate audit`: :func:`resolve` the mechanism, refuse a --json over an input or a run
    artifact, run the audit (:func:`run_audit`) and write its JSON (not private: nothing
    private went in)."""
    fine = _fine_grained_noise(sources)
    if fine is not None:
        if queries != 1:  # it would be ignored: the release is one draw, audited as one
            raise OptionError("--queries", "does not apply to a fine-grained release: its one release is audited "
                              "as one query")
        noise, delta, inputs = fine
        if json_path is not None:
            check_outputs({"--json": json_path}, inputs)
        result = run_fine_grained_audit(noise, trials=trials, confidence=confidence, delta=delta, seed=seed)
        if json_path is not None:
            write_atomic(json_path, (json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n").encode())
        return result
    record, teachers, classes, delta, inputs = resolve(**sources)
    if json_path is not None:
        check_outputs({"--json": json_path}, inputs)
    result = run_audit(record, num_teachers=teachers, num_classes=classes, queries=queries, trials=trials,
                       confidence=confidence, delta=delta, seed=seed)
    if json_path is not None:
        write_atomic(json_path, (json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n").encode())
    return result
