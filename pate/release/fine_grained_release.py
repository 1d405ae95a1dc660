"""Fine-grained PATE as `pate label` releases it (`[aggregation] mechanism = "fine-grained"`):
labels for every point of the public pool from ONE noisy release of the private records' own
votes (`analysis.mechanisms.fine_grained`: the mechanism, its sensitivities, noise and proofs).

The steps, private values in capitals: the public map fitted on the pool
(`pate.programs.public_features`) and the pool's smoothing graph (public); each PRIVATE
record's `votes_per_record` nearest pool points, and the PRIVATE histogram of their votes,
which never leaves this function's memory; the one release (`analysis.mechanisms.fine_grained.release`:
exact discrete Laplace or Gaussian noise on every cell); the labels, post-processing of the
release. labels.npz then holds the pool's indices, its labels, the released noisy histogram
itself (`NOISY_COUNTS`) and this module's record of the release (`record_arrays`); no count, vote
or feature of a private record is written.

Under `pate label --distributed` every process (process 0 too) reads only its own contiguous
slice of the private records (`pate.programs.cluster.Cluster.own_records`), fits the same
public map (a function of the pool alone), counts the votes of that slice (`slice_counts`), and the (point, class) histograms
are summed exactly as integers across processes (`pate.programs.cluster.Cluster.sum_histograms`)
before process 0 alone draws the noise (`release`; the others: `contribute`). The summed histogram is the one process's, record
for record (`private_rows`), so a seeded release's labels are the same in any layout
(randomized response aside: each process randomises its own records, `slice_counts`).

The guarantee is data-independent: pure ε (Laplace) or (ε, δ) from ρ-zCDP (Gaussian) under
replace-one, the same however many points are labelled; no data-dependent or sanitised ε
exists, so `pate analyze` reports the release's ε as its headline and draws nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from analysis.mechanisms import composition, fine_grained
from analysis.reporting import report as report_mod
from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from pate.config import Config, FineGrainedConfig
from pate.programs import public_features
from pate.programs.cluster import block
from pate.release import tuning

#: The arrays of a fine-grained release in labels.npz besides ``indices``, ``labels`` and the
#: record's (`analysis.mechanisms.fine_grained.FineGrained.to_arrays`; `pate.release.labels.RELEASED_KEYS`
#: names them with the rest).
#: The settings that only post-process the release (the smoothing of its noisy rows): changing
#: them changes no privacy, but the labels are written once with the release (and releases before
#: `NOISY_COUNTS` kept no histogram), so applying them to a finished release would need a new one
#: (`pate.steps.pipeline` refuses to draw it silently).
POST_PROCESSING = ("fine_grained.smoothing", "fine_grained.smoothing_weights")
ARRAY_KEYS = ("release_eps", "release_delta", "smoothing", "smoothing_weights", "pca", "scattering", "feature_map",
              "label_noise", "label_eps", "feature_weights_sha256", "feature_filters_sha256",
              "feature_whiten", "noisy_counts")

#: The released noisy histogram itself, (pool points, classes) int64, ``C + Z``: the one array the
#: release's guarantee covers (`analysis.mechanisms.fine_grained.release`), kept beside the labels it
#: gives so that post-processing can read more than their argmax (`pate.release.soft_targets`).
NOISY_COUNTS = "noisy_counts"


def noise_of(cfg: FineGrainedConfig, delta: float) -> fine_grained.Noise:
    """The noise the section asks for, calibrated from public values only: discrete Laplace for
    pure ``cfg.eps``, or the discrete Gaussian for ``cfg.eps`` at ``delta`` (replace-one).

    Raises:
      PateError: `votes_per_record` is still left to the public proxy (0: `pate.release.tuning.settle`
        chooses it first; `charged_noise` bounds the charge before).
    """
    if cfg.votes_per_record == 0:
        raise PateError("internal error: fine_grained.votes_per_record = 0 (chosen on the public proxy) was not "
                        "chosen before the noise")
    if cfg.noise == "laplace":
        return fine_grained.laplace_noise(cfg.eps, cfg.votes_per_record)
    return fine_grained.gaussian_noise(cfg.eps, delta, cfg.votes_per_record)


def charged_noise(cfg: FineGrainedConfig, delta: float) -> fine_grained.Noise:
    """The noise whose charge a release of `cfg` makes at most, known before the public proxy
    chose k (`pate.release.tuning.settle`): `noise_of`, or with k left to the proxy the candidate
    k (`pate.release.tuning.VOTES`) whose ε at `delta` is the largest (Laplace: every k's ε is
    `cfg.eps`'s; Gaussian: σ² lies on the sampler's grid, so the last digits differ)."""
    if cfg.votes_per_record:
        return noise_of(cfg, delta)
    return max((noise_of(dataclasses.replace(cfg, votes_per_record=k), delta) for k in tuning.VOTES),
               key=lambda noise: noise.eps(delta))


@dataclasses.dataclass(frozen=True)
class FineGrainedRelease:
    """What one release made: labels.npz's arrays, its noise (public) and the pool's public
    margins (top smoothed score less the runner-up)."""

    arrays: dict
    noise: fine_grained.Noise
    eps: float
    delta: float
    margins: np.ndarray

    @property
    def record(self) -> fine_grained.FineGrained:
        """The release's mechanism record."""
        return fine_grained.FineGrained(self.noise)


#: Private records are mapped to their quantised rows in chunks of this many, each chunk the
#: same global records whatever the layout (`private_rows`).
ROW_CHUNK = 1000

#: With a research seed, randomized response of process p draws from the seed's stream
#: ``RR_STREAMS + p`` (disjoint from the central noise's `LABELS_STREAM`: `NoiseSource`).
RR_STREAMS = 1 << 32

#: Tests only: called on every process with the exact PRIVATE histogram (all records, summed
#: across processes) just before the noise; None in every real run. Nothing else sees it.
on_histogram: Callable[[np.ndarray], None] | None = None


@dataclasses.dataclass(frozen=True)
class PublicSide:
    """What every process computes identically from public values alone: the release's noise,
    the map fitted on the pool, the pool's quantised rows and its smoothing graph."""

    noise: fine_grained.Noise
    fmap: public_features.PublicMap
    pool_rows: np.ndarray
    graph: np.ndarray
    num_classes: int

    @property
    def pool_size(self) -> int:
        return int(self.pool_rows.shape[0])


def check_settings(config: Config, pool_size: int, private_x: np.ndarray) -> fine_grained.Noise:
    """The section's noise after refusing, in one line, settings the pool or the private
    inputs cannot take; reads no private value (only the inputs' shape)."""
    noise = noise_of(config.fine_grained, config.privacy.delta)
    check_pool_fit(config.fine_grained, pool_size)
    public_features.check_input(config.features.map, private_x)
    return noise


def check_pool_fit(cfg, pool_size: int) -> None:
    """Refuses, in one line, a `[fine_grained]` section whose votes per record or smoothing
    exceed the ``pool_size`` points of the public pool: `pate label` (`check_settings`) and
    `pate plan --config` (`pate.release.target.plan_config`) refuse the same settings."""
    if cfg.votes_per_record > pool_size or cfg.smoothing > pool_size:
        raise PateError(f"fine_grained.votes_per_record ({cfg.votes_per_record}) and smoothing ({cfg.smoothing}) "
                        f"must be at most the {pool_size} points of the public pool")


def check_map_fit(config: Config, pool_x: np.ndarray) -> None:
    """Refuses, in one line, a `[features] map` the public pool's inputs do not take, or a
    `fine_grained.pca` above the directions the pool gives under it (`public_side` refuses the
    same when it fits the map): `pate plan --config` finds them before the run."""
    public_features.check_pca(config.features.map, pool_x, config.fine_grained.pca,
                              public_features.MapSettings.of(config))


def public_side(config: Config, pool_x: np.ndarray, num_classes: int, noise: fine_grained.Noise,
                echo=print) -> PublicSide:
    """The map `[features] map` names fitted on the public pool, the pool's rows and graph: a
    function of the pool and the config alone, so every process of a distributed release
    computes the same (`pate.programs.public_features`: no private value enters the fit)."""
    cfg, feature_map = config.fine_grained, config.features.map
    whitened = ", whitened, one per part" if config.features.whiten else ""
    settings = public_features.MapSettings.of(config)
    fmap, pool_rows = public_features.fit(pool_x, cfg.pca, feature_map=feature_map, settings=settings,
                                          whiten=config.features.whiten)  # a refusal here is the only line
    echo(f"fine-grained: the map {feature_map!r} ({public_features.describe(feature_map, settings)}) and a PCA to "
         f"{cfg.pca}{whitened} fitted on the {pool_x.shape[0]} public pool points")
    graph = fine_grained.nearest_public(pool_rows, pool_rows, cfg.smoothing)
    return PublicSide(noise, fmap, pool_rows, graph, int(num_classes))


def private_rows(fmap: public_features.PublicMap, records: np.ndarray, start: int) -> np.ndarray:
    """The quantised rows of the private records ``start, start + 1, ...`` (`records`, a
    contiguous slice of the train split) under the public map, each computed exactly as in
    any other layout: the map runs on chunks of `ROW_CHUNK` records aligned on the whole
    split's record numbers, each padded with zero inputs to the full chunk, so every record
    is mapped at the same place of an input of the same shape (the scattering transform and
    BLAS order their operations by shapes, never by values: `pate.programs.public_features`),
    whichever process holds it. A zero input maps to a zero row, and padding is dropped."""
    records = np.asarray(records)
    stop = start + records.shape[0]
    parts = []
    for first in range(start - start % ROW_CHUNK, stop, ROW_CHUNK):
        lo, hi = max(first, start), min(first + ROW_CHUNK, stop)
        chunk = np.zeros((ROW_CHUNK, *records.shape[1:]), records.dtype)
        chunk[lo - first:hi - first] = records[lo - start:hi - start]
        parts.append(fmap.rows(chunk)[lo - first:hi - first])
    return np.concatenate(parts) if parts else np.zeros((0, fmap.directions.shape[1]), np.int64)


def slice_counts(side: PublicSide, cfg: FineGrainedConfig, records_x: np.ndarray, records_y: np.ndarray,
                 start: int, rr_source: NoiseSource | None) -> np.ndarray:
    """The PRIVATE (pool point, class) vote counts of the records ``start, start + 1, ...``
    alone (int64): each votes, with its label (randomised first when `cfg.label_noise` says
    so, from `rr_source`), for its `votes_per_record` nearest pool points. The histogram of
    every record is the sum of its slices' counts (`vote_histogram` adds one per record).

    Randomized response, record by record: `fine_grained.randomized_response` draws each
    record's response from its own proposals and coins, so given the labels the responses are
    independent, each with the law of k-ary RR of its own label. A distributed release
    randomises each record once, on the process that holds it, from that process's source
    (independent OS entropy per process): the joint law of all the responses is the same
    product of per-record laws as in one process, so the label-DP guarantee (each record's
    response, locally) and the central one (for every draw of the responses the neighbouring
    histograms differ by one record's votes) are those of one process, unchanged."""
    if not len(records_x):  # an empty slice (more processes than records) counts nothing
        return np.zeros((side.pool_size, side.num_classes), np.int64)
    neighbours = fine_grained.nearest_public(private_rows(side.fmap, records_x, start), side.pool_rows,
                                             cfg.votes_per_record)
    votes_with = records_y
    if cfg.label_noise == "randomized-response":  # each label randomised before it votes (label DP)
        votes_with = fine_grained.randomized_response(records_y, side.num_classes, cfg.label_eps, rr_source)
    return fine_grained.vote_histogram(neighbours, votes_with, side.pool_size, side.num_classes)


def rr_source(seed: int | None, index: int = 0) -> NoiseSource:
    """Randomized response's source on process `index`: its own OS entropy (a real release), or
    with a research seed the seed's stream ``RR_STREAMS + index``: reproducible for one layout,
    and never the central noise's stream (a seeded release's noise is then the same whatever
    the layout; its randomised labels are not, since each process draws for its own records)."""
    return NoiseSource() if seed is None else NoiseSource(seed, stream=RR_STREAMS + int(index))


def publish(side: PublicSide, cfg: FineGrainedConfig, delta: float, counts: np.ndarray,
            source: NoiseSource) -> FineGrainedRelease:
    """The one release of the PRIVATE `counts` (every record's) and the labels it gives."""
    noisy = fine_grained.release(counts, side.noise, source)  # the PRIVATE counts end here
    return labelled(side, cfg, delta, noisy)


def labelled(side: PublicSide, cfg: FineGrainedConfig, delta: float, noisy: np.ndarray) -> FineGrainedRelease:
    """The labels and labels.npz's arrays of a released noisy histogram (post-processing: the
    smoothing over the pool's graph and the argmax), whoever drew its noise: `publish` here, or
    the silos' shares summed (`pate.release.silo_release`)."""
    labels, margins = fine_grained.labels_and_margins(fine_grained.smooth(noisy, side.graph, cfg.smoothing_weights))
    if cfg.label_noise == "randomized-response":  # debiasing moves no label; margins in true votes
        margins = fine_grained.debias_margins(margins, side.num_classes, cfg.label_eps)
    eps = side.noise.eps(delta)
    used_delta = 0.0 if cfg.noise == "laplace" else float(delta)
    arrays = {"indices": np.arange(side.pool_size, dtype=np.int64), "labels": labels.astype(np.int32),
              **record_arrays(cfg, side.noise, eps, used_delta), "feature_map": np.array(side.fmap.name),
              NOISY_COUNTS: np.asarray(noisy, np.int64)}
    arrays.update({key: np.array(digest) for key, digest in side.fmap.digests().items()})  # public weights
    if side.fmap.whiten:
        arrays["feature_whiten"] = np.array(True)
    return FineGrainedRelease(arrays, side.noise, eps, used_delta, margins)


def release(config: Config, splits, source: NoiseSource, echo=print, *, cluster=None,
            seed: int | None = None, total: int | None = None) -> FineGrainedRelease:
    """The labels of every pool point of ``splits`` from one release of the private train
    split's votes (module docstring). ``source``: OS entropy for a real release; `seed`: the
    research seed `source` was made from, if any (randomized response's own stream, `rr_source`).

    `cluster` (`pate.programs.cluster.Cluster`, process 0 of a distributed release): this
    process counts only its own slice of the records, the other processes theirs
    (`contribute`), and the counts are summed exactly before the noise, drawn here alone.
    `total`: the split's record count when ``splits`` holds process 0's slice alone
    (`pate.programs.cluster.Cluster.own_records`), its first records; None when it holds the
    whole split.
    """
    from pate.programs.cluster import Cluster

    cluster = cluster or Cluster(0, 1, gather=lambda x: np.asarray(x)[None])
    if not cluster.leader:
        raise PateError("internal error: only process 0 draws a fine-grained release")
    cfg = config.fine_grained
    noise = check_settings(config, int(splits.pool_x.shape[0]), splits.train_x)  # before any private value
    start = None if total is None else 0
    total = int(splits.train_x.shape[0]) if total is None else int(total)
    cluster.agree(total)  # process 0 passed its checks: every process maps its own slice
    side = public_side(config, splits.pool_x, splits.num_classes, noise, echo)
    counts = _summed_counts(side, config, splits.train_x, splits.train_y, total, cluster, rr_source(seed), echo,
                            start=start)
    return publish(side, cfg, config.privacy.delta, counts, source)


def contribute(config: Config, cluster, seed: int | None = None, echo=print) -> None:
    """A process other than 0 of a distributed fine-grained release: it reads its own slice of
    the private records (`Cluster.own_records`), counts their votes and sends the counts to process
    0; it takes no lock, draws no noise (randomized response aside: its own records' labels,
    from its own source), charges nothing and writes nothing."""
    splits, start, total = cluster.own_records(config.data, config.data.public_size)
    pool_x, num_classes, x, y = splits.pool_x, splits.num_classes, splits.train_x, splits.train_y
    noise = check_settings(config, int(pool_x.shape[0]), x)
    expected = cluster.agree()  # process 0's checks passed: it says how many records it holds
    if expected != total:
        raise PateError(f"process {cluster.index} sees {total} private records but process 0 sees {expected}: "
                        "every process must read the same data set (data.path on a shared file system)")
    side = public_side(config, pool_x, num_classes, noise, echo=lambda _line: None)
    _summed_counts(side, config, x, y, total, cluster, rr_source(seed, cluster.index), echo, start=start)
    stop = start + x.shape[0]
    echo(f"process {cluster.index} of {cluster.count}: "
         + (f"private records {start}-{stop - 1} voted" if stop > start else "no private record to vote with")
         + f" ({total} in all); process 0 draws the release and writes it")


def _summed_counts(side: PublicSide, config: Config, x: np.ndarray, y: np.ndarray, total: int, cluster,
                   source: NoiseSource, echo, start: int | None = None) -> np.ndarray:
    """Every record's vote counts: this process's slice counted (process 0 is given the whole
    split and keeps its own slice), then summed exactly across processes."""
    cfg = config.fine_grained
    rows = cluster.rows(total)
    if start is None:  # process 0 was given every record: its own slice only
        x, y, start = x[rows.start:rows.stop], y[rows.start:rows.stop], rows.start
    if cluster.leader:
        spread = f" ({cluster.count} processes, each its own slice)" if cluster.count > 1 else ""
        echo(f"fine-grained: {total} private records each vote for their {cfg.votes_per_record} nearest pool "
             f"point(s){spread}")
        if cfg.label_noise == "randomized-response":
            echo(f"fine-grained: every private label replaced by k-ary randomized response at eps {cfg.label_eps:g}"
                 + (" (by the process that holds it)" if cluster.count > 1 else ""))
    counts = slice_counts(side, cfg, x, y, start, source)
    records = [len(block(total, cluster.count, p)) for p in range(cluster.count)]
    total_counts = cluster.sum_histograms(counts, [r * cfg.votes_per_record for r in records])
    if on_histogram is not None:
        on_histogram(total_counts)
    return total_counts


def record_arrays(cfg: FineGrainedConfig, noise: fine_grained.Noise, eps: float, delta: float) -> dict:
    """labels.npz's record of the release: the mechanism, its exact noise and its guarantee."""
    return {**fine_grained.FineGrained(noise).to_arrays(),
            "release_eps": np.array(float(eps)), "release_delta": np.array(float(delta)),
            "smoothing": np.array(cfg.smoothing), "smoothing_weights": np.array(cfg.smoothing_weights),
            "pca": np.array(cfg.pca),
            "scattering": np.array(f"J {cfg.scattering_j}, L {cfg.scattering_l}, groups {cfg.groups}"),
            "label_noise": np.array(cfg.label_noise), "label_eps": np.array(float(cfg.label_eps))}


def label_dp_record(arrays: Mapping) -> dict:
    """What the ledger keeps of a release's randomized response at the source: ``{"label_eps": ε_L}``
    (public: a setting), or nothing for a release without it."""
    if str(np.asarray(arrays.get("label_noise", "none"))) != "randomized-response":
        return {}
    return {"label_eps": float(np.asarray(arrays["label_eps"]))}


def data_set_label_dp(entries: list, delta: float, cumulative: tuple[float, float]) -> tuple[float, float]:
    """``(ε, δ)`` of label DP for a data set over every release its ledger records (``entries``,
    `pate.store.ledger.Ledger.releases`), by basic composition (Dwork & Roth 2014, Theorem 3.16) under
    label-DP neighbours (one record's label changed: Ghazi et al., NeurIPS 2021): a release made with
    randomized response at the source counts its ``label_eps`` (pure, `label_dp_record`), or its
    own ε where smaller; any other release its own ε at ``delta`` (a replace-one guarantee is a
    label-DP one: changing a label replaces the record). The data set's replace-one figure
    ``cumulative`` is a label-DP figure too, so the smaller of the two is returned. Each
    release re-randomises the labels, so ε_L is spent once per release, never once for all."""
    eps, at = 0.0, 0.0
    for entry in entries:
        cost = composition.Cost.from_json(entry["cost"])
        own = composition.single_eps(cost, delta)
        own_delta = float(cost.params["delta"]) if cost.kind == "approx" else (0.0 if own == 0 else float(delta))
        label_eps = (entry.get("mechanism") or {}).get("label_eps")
        if isinstance(label_eps, (int, float)) and not isinstance(label_eps, bool) and label_eps < own:
            own, own_delta = float(label_eps), 0.0
        eps, at = eps + own, at + own_delta
    return (eps, at) if eps <= cumulative[0] else (float(cumulative[0]), float(cumulative[1]))


def with_data_set_label_dp(rep: report_mod.PrivacyReport, entries: list, delta: float,
                           data_set: Mapping) -> report_mod.PrivacyReport:
    """``rep`` with the data set's label-DP figure (`data_set_label_dp` over the ledger's
    ``entries``, capped by the data set's headline in ``data_set``) beside this release's
    ``label_eps``; unchanged for a release without randomized response."""
    if not any(item.key == "label_eps" for item in rep.items):
        return rep
    eps, at = data_set_label_dp(entries, delta, (float(data_set["eps"]), float(data_set["delta"])))
    return report_mod.extend(rep, [report_mod.Item(
        "label_eps_data_set", "label-DP eps of the data set (every release)", eps, True,
        f"at delta {at:g}; each release's randomized response (or its own eps) added: a second release "
        "randomises the labels again")])


def report(labels: Mapping, delta: float, source: str = "labels.npz") -> report_mod.PrivacyReport:
    """`pate analyze`'s report of a fine-grained release: its ε is data-independent, computed
    from the recorded noise alone (no vote read); no data-dependent or sanitised row exists."""
    noise = fine_grained.FineGrained.from_arrays(labels, source).noise
    gaussian = noise.kind == "gaussian"
    eps = noise.eps(delta)
    headline_delta = float(delta) if gaussian else 0.0
    n = int(np.asarray(labels["indices"]).size)
    kind = (f"(eps, delta) from rho-zCDP, rho {float(noise.rho):.6g} (discrete Gaussian, sigma^2 {noise.parameter})"
            if gaussian else f"pure eps (discrete Laplace, scale {noise.parameter})")
    items = (
        report_mod.Item("eps", f"{report_mod.OWN_EPS} (one noisy histogram)", eps, True,
                        "data-independent: one release labels every pool point"),
        report_mod.Item("delta_total", report_mod.OWN_DELTA, headline_delta, True,
                        "pure: no delta" if not gaussian else "the discrete Gaussian's"),
        report_mod.Item("guarantee", "kind of guarantee", kind, True,
                        "no data-dependent or smooth-sensitivity analysis: none is needed"),
        report_mod.Item("labelled_points", "labelled pool points", n, True, "all of them, from one release"),
        report_mod.Item("votes_per_record", "votes per private record (k)", noise.votes, True,
                        f"L1 sensitivity {fine_grained.l1_sensitivity(noise.votes)} (replace-one)"),
        report_mod.Item("smoothing", "smoothing neighbours (public graph)", int(np.asarray(labels["smoothing"])), True,
                        f"post-processing; weights {str(np.asarray(labels.get('smoothing_weights', 'uniform')))}"),
        report_mod.Item("delta", "delta", float(delta), True),
    )
    tuned = (labels.get("meta") or {}).get(tuning.META_KEY)
    if isinstance(tuned, Mapping):  # settings the public proxy chose when the release was drawn
        items += (
            report_mod.Item("settings_chosen", "how the fine-grained settings were chosen", tuning.CHOSEN, True,
                            f"best of {tuned.get('candidates')} on the public pool alone, the release's noise scaled "
                            f"to the proxy (eps x {float(tuned.get('eps_factor', 0)):.3g}); no private record read"),
            report_mod.Item("settings_chosen_keys", "settings chosen on the public proxy",
                            ", ".join(map(str, tuned.get("chosen", ()))), True,
                            f"weights {tuned.get('smoothing_weights')}"),
            report_mod.Item("proxy_label_accuracy", "label accuracy on the public proxy",
                            float(tuned.get("proxy_label_accuracy", float("nan"))), True,
                            f"± {float(tuned.get('proxy_label_std', float('nan'))):.4f} over {tuned.get('draws')} "
                            "seeded draws: public benchmark output, not this release's"),
        )
    silos = (labels.get("meta") or {}).get("silos") if isinstance(labels.get("meta"), dict) else None
    if isinstance(silos, dict):  # a release across silos (`pate silos run`): the trust it assumes
        items += (report_mod.Item(
            "silos", "silos whose noise shares were summed",
            f"{silos.get('present')} present; {silos.get('needed')} of {silos.get('silos')} needed", True,
            "the eps assumes the shares needed were added honestly (fewer were refused); a coalition of silos "
            "learns no more while that many others are honest (docs/silos.md)"),)
    if str(np.asarray(labels.get("label_noise", "none"))) == "randomized-response":
        label_eps = float(np.asarray(labels["label_eps"]))
        items += (report_mod.Item("label_eps", "label-DP eps of randomized response at the source", label_eps, True,
                                  "each private label randomised (k-ary RR, exact) before it voted: "
                                  "one record's label, its features kept; not the replace-one figure"),)
    return report_mod.PrivacyReport(mechanism=fine_grained.FineGrained.name, items=items)


def describe_plan(config: Config) -> str:
    """`pate plan --config` of a fine-grained config: the release's noise and its ε, fixed by
    the config alone (public values; no vote or private record is read)."""
    cfg, delta = config.fine_grained, config.privacy.delta
    public_features.check_ready(config.features.map, public_features.MapSettings.of(config))
    noise = charged_noise(cfg, delta)
    k = noise.votes
    guarantee = (f"pure eps {noise.eps():.6g} (delta 0)" if noise.kind == "laplace"
                 else f"eps {noise.eps(delta):.6g} at delta {delta:g} (rho-zCDP, rho {float(noise.rho):.6g})")
    votes = (f"its {k} nearest pool point(s) (replace-one sensitivity {fine_grained.l1_sensitivity(k)})"
             if cfg.votes_per_record else f"its k nearest pool points, k of {', '.join(map(str, tuning.VOTES))}")
    scale = (f"{'scale' if noise.kind == 'laplace' else 'variance'} {noise.parameter}" if cfg.votes_per_record
             else f"{'scale 2k / eps' if noise.kind == 'laplace' else 'variance for 2k votes'} at that k")
    lines = [f"fine-grained: one release labels all {config.data.public_size} pool points; each private record votes for "
             f"{votes}",
             f"noise             exact discrete {noise.kind}, {scale}"]
    if cfg.auto:
        lines.append(f"chosen later      {', '.join(cfg.auto)}: on the public proxy with the release's noise when the "
                     "release is drawn (`pate ceiling --tune` shows the choice now; no private record is read)")
    return "\n".join([
        *lines,
        f"headline          {guarantee}, replace-one: known now, whatever the data (nothing to plan)",
        f"ledger charge     {noise.cost().describe()}",
    ])
