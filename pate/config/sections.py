"""The config sections: one frozen dataclass per TOML table (`[data]`, `[teachers]`,
`[aggregation]`, `[fine_grained]`, `[features]`, `[privacy]`, `[student]`, `[rounds]`, `[dpsgd]`, `[fedavg]`, `[synth]`, `[silos]`), each with its
defaults and a `validate()` that names the key at fault, and `Config`, the registry of sections
(`[rounds]`'s `RoundsConfig` lives in `pate.config.round_sections`; the baselines' `[dpsgd]`,
`[fedavg]` and `[synth]` in `pate.config.baseline_sections`; `[silos]` in `pate.config.silo_sections`).

Loading, overrides, TOML output and hashing live in `pate.config`, which re-exports every
name here; import them from there. To add a section, write a frozen dataclass with defaults
and a `validate()` method here and add it as a field of `Config`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Literal

from analysis.mechanisms.registry import NAMES as MECHANISMS
from pate.data.formats import NAMES as DATA_FORMATS
from pate.data.formats import format_of
from pate.config.baseline_sections import DpsgdConfig, FedavgConfig, SynthConfig
from pate.config.round_sections import RoundsConfig
from pate.config.silo_sections import SilosConfig
from pate.config.checks import FLOAT32_MAX, MAX_EPS, at_least_one, check_map, eps, positive
from pate.config.checks import require as _require

#: `[student] targets`: what the student learns from (`StudentConfig`).
STUDENT_TARGETS = ("hard", "posterior")


def _check_model_keys(cfg: "TeachersConfig | StudentConfig", s: str) -> None:
    """The keys `[teachers]` and `[student]` share (the network and its training),
    checked once for both so that their rules cannot drift apart."""
    _require(cfg.gabor_orientations >= 0, s, "gabor_orientations", "must be >= 0")
    _require(all(f >= 1 for f in cfg.conv_features), s, "conv_features", "must be positive channel counts")
    for key in ("conv_kernels", "conv_strides"):
        values = getattr(cfg, key)
        _require(cfg.model not in ("cnn", "wrn") or len(values) == len(cfg.conv_features), s, key,
                 f"must have one entry per layer of conv_features ({len(cfg.conv_features)}), "
                 f"got {list(values)}")
        _require(all(v >= 1 for v in values), s, key, f"must be positive, got {list(values)}")
    _require(all(h >= 1 for h in cfg.hidden), s, "hidden", "must be positive widths")
    _require(cfg.model != "linear" or not cfg.hidden, s, "hidden",
             f"must be empty for model = \"linear\" (a linear head), got {list(cfg.hidden)}; use model = \"mlp\"")
    _require((cfg.model == "module") == bool(cfg.module), s, "module",
             "must name the flax module (\"package.module:Class\") when model = \"module\"" if cfg.model == "module"
             else f"is set ({cfg.module!r}) but model = {cfg.model!r}; set model = \"module\" or remove module")
    _require(not cfg.module or re.fullmatch(_IMPORT_PATH, cfg.module) is not None, s, "module",
             f"must be an import path \"package.module:Class\", got {cfg.module!r}")
    _require(0 <= cfg.dropout < 1, s, "dropout", "must be in [0, 1)")
    at_least_one(s, cfg, "batch_size")
    # Teachers and students stop with one line when training diverges (NaN), so only a rate float32
    # cannot hold is refused here (its cast would overflow into warnings before any step).
    _require(0 < cfg.learning_rate <= FLOAT32_MAX, s, "learning_rate",
             f"must be a positive number a float32 holds (at most {FLOAT32_MAX:.3g}), got {cfg.learning_rate:g}")
    _require(0 <= cfg.momentum < 1, s, "momentum", "must be in [0, 1)")
    _require(cfg.weight_decay >= 0, s, "weight_decay", "must be >= 0")
    _require(cfg.augment_shift >= 0, s, "augment_shift", "must be >= 0")
    _require(cfg.eval_batch_size >= 1, s, "eval_batch_size", "must be >= 1")
    _require(cfg.seed >= 0, s, "seed", f"must be >= 0, got {cfg.seed}")


#: `module = "package.module:Class"`: dotted identifiers, a colon, a class name.
_IMPORT_PATH = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*"


#: The most memory the synthetic data set's images may take (float32, both splits): a shape
#: past it would exhaust memory part-way through a run instead of being refused up front.
MAX_SYNTHETIC_BYTES = 16 * 2**30


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """`[data]`: which data set, where it lives, and how its test split is divided.

    The private training set is the data set's train split. The first `public_size`
    points of its test split are the student's public pool; the rest only evaluates.
    `path` is a directory (IDX, SVHN) or a file (npz); empty means the default location
    (or `$PATE_DATA_DIR`). The `synthetic_*` keys shape the synthetic data set used by
    tests: class prototypes in [0, 1] plus Gaussian noise. `dataset`: the name of the data set
    these records belong to, declared (empty: known by its records alone): every split
    declaring one name is one data set in the ledger (`pate.store.identity.data_identity`),
    for the same people content cannot recognise (re-encoded, or as embeddings).
    """

    name: Literal[DATA_FORMATS] = "fashion_mnist"
    path: str = ""
    public_size: int = 9000
    synthetic_train_size: int = 2000
    synthetic_test_size: int = 600
    synthetic_shape: tuple[int, ...] = (8, 8, 1)
    synthetic_classes: int = 10
    synthetic_noise: float = 0.3
    synthetic_seed: int = 0
    dataset: str = ""

    def validate(self) -> None:
        s = "data"
        _require(self.dataset == self.dataset.strip() and self.dataset.isprintable() and len(self.dataset) <= 200,
                 s, "dataset", f"must be one line of printable text of at most 200 characters with no space at "
                 f"either end, got {self.dataset[:40]!r}")
        _require(self.public_size >= 0, s, "public_size", f"must be >= 0, got {self.public_size}")
        fmt = format_of(self.name)
        _require(not fmt.needs_path or bool(self.path), s, "path",
                 f"must name {fmt.path_names} when data.name = \"{self.name}\"")
        _require(self.synthetic_train_size >= 1, s, "synthetic_train_size", "must be >= 1")
        _require(self.synthetic_test_size >= 1, s, "synthetic_test_size", "must be >= 1")
        _require(len(self.synthetic_shape) == 3 and all(d >= 1 for d in self.synthetic_shape),
                 s, "synthetic_shape", f"must be [height, width, channels] of positive sizes, "
                 f"got {list(self.synthetic_shape)}")
        points = self.synthetic_train_size + self.synthetic_test_size
        size = points * math.prod(self.synthetic_shape) * 4  # float32 images, both splits
        _require(size <= MAX_SYNTHETIC_BYTES, s, "synthetic_shape",
                 f"{list(self.synthetic_shape)} makes {points} float32 images of {size / 2**30:.3g} GiB in all, "
                 f"more than {MAX_SYNTHETIC_BYTES // 2**30} GiB; use smaller images or fewer points")
        _require(self.synthetic_classes >= 2, s, "synthetic_classes", "must be >= 2")
        _require(self.synthetic_noise >= 0, s, "synthetic_noise", "must be >= 0")
        _require(self.synthetic_seed >= 0, s, "synthetic_seed", f"must be >= 0, got {self.synthetic_seed}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeachersConfig:
    """`[teachers]`: the ensemble, its model and how each teacher is trained.

    `model = "cnn"`: when `gabor_orientations` > 0, first a fixed, data-independent
    layer (the modulus of that many oriented 5x5 Gabor filters plus a low-pass, stride
    2; see `pate.programs.models.GaborModulus`); then convolutions with `conv_features[i]`
    channels, square kernels of
    `conv_kernels[i]` and stride `conv_strides[i]` (zero padding `kernel // 2`), each
    followed by ReLU and, when `conv_pool`, a 2x2 max pool; then dense layers of widths
    `hidden`, dropout `dropout` (training only), and the classifier. `model = "mlp"`
    uses only `hidden` and `dropout`, and `model = "linear"` is a linear head (no
    `hidden`): both flatten their input, so they are the teachers of a data set of
    embeddings (vmapped heads on the feature rows, trained as the CNNs are). `model =
    "module"`: the user's flax module `module` names (`"package.module:Class"`, built as
    `Class(num_classes=C)`; `pate.programs.user_model`). `features`: "" (the teachers see the
    inputs as they are) or a public map as `[features] map` names them ("scattering",
    "scattering+pixels", ...; `pate.programs.public_features.InputMap`): the teachers then train
    on, are scored on and vote with each input's coefficients under that map (no pool PCA; the
    scattering settings are `[fine_grained]`'s), so they are heads (`linear`, `mlp`, `module`)
    on a public representation; the student is unaffected. `conv_impl` picks how a convolution runs:
    "patches" (strided slices + one batched matmul; fast on CPU when vmapped over
    teachers), "xla" (`lax.conv`, for GPUs), "auto" (patches on CPU, xla elsewhere).
    Both give the same function of the same parameters. `eval_flip` makes a teacher
    predict from the mean of its log-probabilities on an image and its mirror image
    (test-time augmentation; for data sets whose classes are mirror-symmetric).

    Training: `epochs` passes over each teacher's shard in batches of `batch_size`
    (the last partial batch of an epoch is dropped), AdamW or SGD with momentum, a
    cosine or constant learning-rate schedule, label smoothing, optional random
    shifts of up to `augment_shift` pixels and horizontal flips. `seed` fixes the
    partition, the initialisation and every shuffle. A checkpoint is written every
    `checkpoint_every` epochs and at the end. `teacher_chunk` teachers are vmapped
    together per step, chunk after chunk (0: automatic, a few on CPU where that keeps
    the working set in cache, all at once on accelerators); it changes speed, not
    results. `eval_batch_size` images are predicted per call.
    """

    num_teachers: int = 250
    model: Literal["cnn", "mlp", "linear", "module"] = "cnn"
    module: str = ""
    features: str = ""
    gabor_orientations: int = 0
    conv_features: tuple[int, ...] = (32, 64)
    conv_kernels: tuple[int, ...] = (5, 3)
    conv_strides: tuple[int, ...] = (2, 2)
    conv_pool: bool = False
    conv_impl: Literal["auto", "patches", "xla"] = "auto"
    hidden: tuple[int, ...] = ()
    dropout: float = 0.0
    eval_flip: bool = False
    epochs: int = 60
    batch_size: int = 24
    learning_rate: float = 3e-3
    optimizer: Literal["adamw", "sgd"] = "adamw"
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: Literal["cosine", "constant"] = "cosine"
    label_smoothing: float = 0.0
    augment_shift: int = 0
    augment_flip: bool = False
    seed: int = 0
    checkpoint_every: int = 5
    eval_batch_size: int = 100
    teacher_chunk: int = 0

    def validate(self) -> None:
        s = "teachers"
        at_least_one(s, self, "num_teachers")
        _check_model_keys(self, s)
        if self.features:
            check_map(s, "features", self.features)
            _require(self.model != "cnn", s, "features", f"= {self.features!r} gives the teachers rows of "
                     'features, which a CNN cannot read; set teachers.model = "linear", "mlp" or "module"')
        at_least_one(s, self, "epochs")
        _require(0 <= self.label_smoothing < 1, s, "label_smoothing", "must be in [0, 1)")
        _require(self.checkpoint_every >= 1, s, "checkpoint_every", "must be >= 1")
        _require(self.teacher_chunk >= 0, s, "teacher_chunk", "must be >= 0 (0: automatic)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregationConfig:
    """`[aggregation]`: the noisy aggregator `pate label` releases labels with.

    `mechanism`: one of the records of `analysis.mechanisms.registry`: "lnmax" (Laplace noise of
    scale 1/`gamma` on every count, PATE 2017), "gnmax" (Gaussian noise of std `sigma`, PATE
    2018), "confident-gnmax" (answer only when the top count plus N(0, `sigma_threshold`²)
    reaches `threshold`, then GNMax with `sigma`), "gnmax-exact" and "confident-gnmax-exact"
    (the same with exact discrete Gaussian noise: no float64 δ, no sanitised release, the
    headline data-independent), "permute-and-flip" or "exponential" (each answer 2`gamma`-DP,
    sampled exactly). The first `queries` points of the public pool are queried. The noise seed
    is never part of a config: `pate label --seed` only. "fine-grained" labels the whole
    pool from one release of the private records' own votes and needs no teachers: its
    settings are `[fine_grained]`'s, and the keys here do not apply.

    `allow_near_chance`: release labels that the plan expects near chance anyway. `pate plan
    --config`, `pate label` and `pate run` state the answers and label accuracy a release is
    expected to buy on simulated public votes (`analysis.planning.expected_outcome`) and refuse,
    before any training, vote or charge, one expected near chance; true releases it, and
    release.json's warnings say so. A permission: it changes no artifact, so no step's hash.
    """

    mechanism: Literal[MECHANISMS] = "lnmax"
    queries: int = 100
    gamma: float = 0.05
    sigma: float = 40.0
    threshold: float = 200.0
    sigma_threshold: float = 150.0
    allow_near_chance: bool = False

    def validate(self) -> None:
        s = "aggregation"
        at_least_one(s, self, "queries")
        positive(s, self, "gamma", "sigma", "sigma_threshold")
        _require(0 <= self.threshold < float("inf"), s, "threshold", f"must be >= 0, got {self.threshold}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineGrainedConfig:
    """`[fine_grained]`: fine-grained PATE (`[aggregation] mechanism = "fine-grained"`;
    `analysis.mechanisms.fine_grained`): each private record votes, with its label, for the
    `votes_per_record` public pool points nearest to it in a public feature space (the
    scattering transform, `scattering_j` scales, `scattering_l` orientations, each example
    group-normalised over `groups` channel groups, then the top `pca` principal directions of
    the public pool alone, unit norm); the (point, class) histogram is released once with
    exact discrete `noise` ("laplace": pure `eps`; "gaussian": `eps` at `[privacy] delta`)
    under replace-one; each pool point's label is the argmax of the noisy rows of its
    `smoothing` nearest pool points (post-processing), the r-th nearest weighted 1/r
    (`smoothing_weights = "harmonic"`) or 1 ("uniform"). Labels every pool point.
    `label_noise = "randomized-response"` first replaces each private label by k-ary randomized
    response at `label_eps` (exact; `analysis.mechanisms.fine_grained.randomized_response`): each
    label is then `label_eps`-DP locally (label DP), on top of the central replace-one `eps`.
    `votes_per_record = 0`, `smoothing = 0`, `smoothing_weights = "auto"`: chosen when the
    release is drawn, on the public proxy with the release's own noise
    (`pate.release.tuning`: the labelled public pool alone, no private record); a value set here wins.
    """

    eps: float = 1.0
    noise: Literal["laplace", "gaussian"] = "laplace"
    votes_per_record: int = 1  # 0: chosen on the public proxy (`pate.release.tuning`)
    smoothing: int = 40  # 0: chosen on the public proxy
    smoothing_weights: Literal["uniform", "harmonic", "auto"] = "harmonic"
    pca: int = 128
    scattering_j: int = 2
    scattering_l: int = 8
    groups: int = 27
    label_noise: Literal["none", "randomized-response"] = "none"
    label_eps: float = 0.0

    def validate(self) -> None:
        s = "fine_grained"
        eps(s, self, "eps")
        # The release's ε is the largest multiple of 1e-6 not above it (exact noise needs a rational:
        # `analysis.mechanisms.fine_grained.rational_eps`); 1e-6 as a float lies just below 1e-6.
        _require(self.eps > 1e-6, s, "eps", f"must be more than 1e-06 (the release rounds eps down to a multiple "
                 f"of 1e-06 for exact noise), got {self.eps:g}")
        if self.label_noise == "randomized-response":
            positive(s, self, "label_eps")
            _require(self.label_eps <= 50, s, "label_eps", f"must be at most 50 (beyond it the response is the "
                     f"label itself up to e^-50), got {self.label_eps}")
            # Below it a randomised label is its class with a chance above the others' by less than 1e-6 / C:
            # labels of noise, and the debiasing scale 1 / (p - q) past anything a float64 count holds
            # (1e-300 divided by zero and released, exit 0).
            _require(self.label_eps >= 1e-6, s, "label_eps", f"must be at least 1e-06 (below it the randomised "
                     f"labels carry no signal), got {self.label_eps:g}")
        else:
            _require(self.label_eps == 0, s, "label_eps", 'applies with label_noise = "randomized-response" only')
        for key in ("votes_per_record", "smoothing"):
            _require(getattr(self, key) >= 0, s, key,
                     f"must be >= 1, or 0 (chosen on the public proxy), got {getattr(self, key)}")
        at_least_one(s, self, "pca", "scattering_j", "scattering_l", "groups")

    @property
    def auto(self) -> tuple[str, ...]:
        """The keys left to `pate.release.tuning` (0, or "auto"), in the grid's order."""
        return tuple(key for key, free in (("votes_per_record", self.votes_per_record == 0),
                                           ("smoothing", self.smoothing == 0),
                                           ("smoothing_weights", self.smoothing_weights == "auto")) if free)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FeaturesConfig:
    """`[features]`: the public feature map of the run (`pate.programs.public_features`), in which
    fine-grained PATE's records vote for their nearest pool points. `map`: "scattering" (the
    ScatterNet coefficients, `[fine_grained]`'s `scattering_j`, `scattering_l`, `groups`),
    "pixels" (the images' pixels, flattened), "none" (the rows as they are: a data set of
    embeddings), or maps joined by "+" ("scattering+pixels": each part scaled by its root mean
    square norm over the public pool, then concatenated), or "learned" (a self-supervised
    encoder trained on the public pool's images alone by `pate features --out DIR`; `weights`
    names DIR, its weights checked against their recipe's digest: `pate.programs.learned_map`;
    also the teachers' `[teachers] features = "learned"`), or "hog" (histograms of oriented
    gradients, `pate.programs.hog`: cells of `hog_cell` pixels, `hog_bins` orientation bins over
    360 degrees when `hog_signed`, else 180, L2-Hys blocks of `hog_block` x `hog_block` cells;
    defaults 4, 12, signed, 2), or "coates-ng" (k-means filters fitted on the public pool's
    patches by `pate features --kind coates-ng --out DIR`; `filters` names DIR, checked by digest;
    left empty, the default recipe's filters are fitted on the pool once and kept by digest in
    `$PATE_CACHE_DIR` or `~/.cache/pate`: `pate.programs.coates_ng`).
    The pool PCA and quantisation follow; `whiten` (default false) gives each part of the map its
    own pool PCA, each component divided by its pool s.d., each part to unit norm before the join.
    The map is a function of the public pool alone.
    """

    map: str = "scattering"
    weights: str = ""
    filters: str = ""
    whiten: bool = False
    hog_cell: int = 4
    hog_bins: int = 12
    hog_signed: bool = True
    hog_block: int = 2

    def validate(self) -> None:
        check_map("features", "map", self.map)
        _require(bool(self.weights) or "learned" not in self.map.split("+"), "features", "weights",
                 f"is empty but map = {self.map!r} names \"learned\"; set it to the folder "
                 "`pate features --out DIR` wrote")
        _require(1 <= self.hog_cell <= 64, "features", "hog_cell", f"must be 1..64 pixels, got {self.hog_cell}")
        _require(2 <= self.hog_bins <= 64, "features", "hog_bins", f"must be 2..64 bins, got {self.hog_bins}")
        _require(1 <= self.hog_block <= 8, "features", "hog_block", f"must be 1..8 cells, got {self.hog_block}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrivacyConfig:
    """`[privacy]`: how `pate analyze` accounts and releases ε.

    `delta`: the δ of every (ε, δ) figure. LNMax: the moments accountant over orders
    1..`moments` and the smooth-sensitivity release with smoothness `lnmax_beta`. GNMax:
    the RDP → (ε, δ) `conversion`, and the GNSS release at `release_order` (0 = the
    order of the data-independent optimum, a public quantity; never the data-dependent
    best order, which would be chosen from the private votes) spending `release_cost`
    of RDP at that order, with smoothness `gnss_beta` (0 = 0.1 / release order).

    `total_budget`: the most ε (at `delta`) every release from this private data set may
    spend together, in any run directory (`pate ledger`); a release that would go over
    it is refused before anything is written (0 = no limit). `ledger`: the folder of the
    ledgers (empty: `$PATE_LEDGER_DIR`, else the user's state folder). `new_data_set`: a
    training split that shares most of its records with a data set of that folder (counted
    against either side) is that data set (its ledger, its budget), and one sharing any
    record is linked to it (each one's releases count against the other's budget); true
    names this split a new data set on purpose, linked to none.

    `target_eps` > 0 (GNMax, Confident-GNMax): `pate label` chooses the release order, β,
    cost and the queries (at most `[aggregation] queries`) so that the headline is at
    most `target_eps` with probability `target_probability` over the release noise, on
    votes simulated from a public model with mean teacher accuracy `target_accuracy`
    (`analysis.planning.headline_target`); `release_order`, `release_cost` and `gnss_beta` are
    then not used. 0 = off.
    """

    delta: float = 1e-5
    moments: int = 8
    lnmax_beta: float = 0.09  # = analysis.sanitised.lnmax_release.DEFAULT_BETA (checked by a test)
    gnss_beta: float = 0.0  # 0: beta = 0.1 / release order (analysis.sanitised.gnss.BETA_TIMES_ORDER)
    conversion: Literal["classic", "improved"] = "classic"
    release_order: float = 0.0
    release_cost: float = 0.2
    total_budget: float = 0.0
    ledger: str = ""
    new_data_set: bool = False
    target_eps: float = 0.0
    target_probability: float = 0.95
    target_accuracy: float = 0.7

    def validate(self) -> None:
        s = "privacy"
        _require(0 < self.delta < 1, s, "delta", f"must lie strictly between 0 and 1, got {self.delta}")
        _require(1 <= self.moments <= 64, s, "moments", f"must be between 1 and 64 (analysis.bounds.lnmax."
                 f"MAX_MOMENTS), got {self.moments}")
        _require(self.lnmax_beta > 0, s, "lnmax_beta", f"must be > 0, got {self.lnmax_beta}")
        _require(self.gnss_beta >= 0, s, "gnss_beta", f"must be 0 (0.1 / release order) or > 0, got {self.gnss_beta}")
        _require(self.release_order == 0 or self.release_order > 1, s, "release_order",
                 f"must be 0 (auto) or an order > 1, got {self.release_order}")
        _require(0 < self.release_cost <= 10, s, "release_cost",
                 f"must lie in (0, 10] (RDP at the release order), got {self.release_cost}")
        _require(self.total_budget >= 0 and self.total_budget < float("inf"), s, "total_budget",
                 f"must be 0 (no limit) or a finite eps > 0, got {self.total_budget}")
        _require(not self.ledger or os.path.isabs(os.path.expanduser(self.ledger.strip())), s, "ledger",
                 f"must be an absolute folder (or ~/...), got {self.ledger!r}: a relative one would move with the "
                 "working directory, and the data set's budget with it")
        _require(0 <= self.target_eps <= MAX_EPS, s, "target_eps",
                 f"must be 0 (off) or an eps > 0 of at most {MAX_EPS:g}, got {self.target_eps:g}")
        _require(0.5 <= self.target_probability < 1, s, "target_probability",
                 f"must lie in [0.5, 1), got {self.target_probability}")
        _require(0 < self.target_accuracy < 1, s, "target_accuracy", f"must lie in (0, 1), got {self.target_accuracy}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudentConfig:
    """`[student]`: the semi-supervised student trained on the released labels.

    `method`: "fixmatch" (consistency training on the unlabelled pool, Sohn et al.
    2020) or "supervised" (the labelled queries alone). The model keys mean what they
    mean in `[teachers]` (`gabor_orientations` > 0: a fixed Gabor-modulus first layer;
    `eval_flip`: predict from an image and its mirror). Training runs `steps` steps of
    `batch_size` labelled and `mu * batch_size` unlabelled images, AdamW (or SGD with
    Nesterov momentum) at `learning_rate` with `warmup_steps` of linear warm-up and a
    cosine decay to zero. Pseudo-labels count where the weakly augmented prediction's
    confidence is at least `threshold`, weighted by `lambda_u`. Weak augmentation:
    shifts of up to `augment_shift` pixels and, with `augment_flip`, mirror images;
    strong augmentation adds, when `affine_degrees` > 0, a random rotation/shear/scale,
    then brightness, contrast, sharpness, noise and a `cutout`-pixel square. `ema` is
    the decay of the weight average that evaluates and is saved. `seed` fixes the
    initialisation, the batches and the augmentations.

    Two corrections for the class skew of a confident release (the classes the teachers
    agree on least are answered least: a 1000-teacher release held 15 "Shirt" labels of
    1031), both post-processing of public values: `balance_labels` draws each labelled
    batch with every released class equally likely; `distribution_alignment` (Berthelot
    et al., "ReMixMatch", ICLR 2020) rescales each pool prediction by
    `uniform / running mean of the predictions` before its pseudo-label is taken (it
    assumes the pool's classes are balanced, as in the benchmark splits).
    `adaptive_threshold` (FlexMatch, Zhang et al., NeurIPS 2021) lowers the confidence
    threshold of the classes whose pool images the student predicts confidently least often.

    `model = "wrn"`: a Wide-ResNet-style network for accelerators (`pate.programs.models.WideResNet`):
    `conv_features` are its groups' widths, `conv_strides` their strides, `wrn_blocks`
    the residual blocks per group (`conv_kernels`, `gabor_orientations`, `hidden` unused).

    `model = "mlp"` / `"linear"` / `"module"` as in `[teachers]`. On embeddings (rows of
    features) no augmentation applies: FixMatch's two views are then the row itself, and
    it is confidence-thresholded pseudo-labelling of the pool (Lee 2013).

    `neighbours` > 0: the published predictor is the network and a neighbour student averaged
    (issue 55): each input's `neighbours` nearest labelled pool points under the public map
    `[features]` names (fitted on the public pool alone, as the fine-grained release fits it;
    `pate.programs.neighbour_student`), the r-th nearest weighted 1/r, their label fractions added to
    the network's softmax. Post-processing of the released labels with public inputs: no ε.
    0 (default): the network alone.

    `targets`: what the student learns from on each labelled pool point. "hard" (default): the
    released label. "posterior": the posterior over the label the fine-grained release would give
    without its noise, from its released noisy histogram and its public noise law, under a flat prior
    (ALIBI-style soft targets, `pate.release.soft_targets`; the neighbour student averages them too).
    Post-processing of the release: no ε. Fine-grained releases only (labels.npz's `noisy_counts`).

    The defaults are the CPU-measured Fashion-MNIST student (docs/results.md).
    """

    method: Literal["fixmatch", "supervised"] = "fixmatch"
    model: Literal["cnn", "mlp", "wrn", "linear", "module"] = "cnn"
    module: str = ""
    gabor_orientations: int = 8
    conv_features: tuple[int, ...] = (64,)
    conv_kernels: tuple[int, ...] = (3,)
    conv_strides: tuple[int, ...] = (2,)
    conv_pool: bool = False
    conv_impl: Literal["auto", "patches", "xla"] = "auto"
    hidden: tuple[int, ...] = ()
    dropout: float = 0.0
    steps: int = 10000
    batch_size: int = 64
    mu: int = 3
    threshold: float = 0.95
    lambda_u: float = 1.0
    learning_rate: float = 3e-3
    optimizer: Literal["adamw", "sgd"] = "adamw"
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_steps: int = 0
    ema: float = 0.999
    augment_shift: int = 2
    augment_flip: bool = False
    cutout: int = 8
    affine_degrees: float = 0.0
    eval_flip: bool = False
    balance_labels: bool = False
    distribution_alignment: bool = False
    adaptive_threshold: bool = False
    seed: int = 0
    eval_batch_size: int = 500
    wrn_blocks: int = 2
    neighbours: int = 0
    targets: str = "hard"

    def validate(self) -> None:
        s = "student"
        _check_model_keys(self, s)
        _require(0 <= self.neighbours <= 1000, s, "neighbours", "must be 0 (the network alone) to 1000 pool points")
        _require(self.targets in STUDENT_TARGETS, s, "targets", f"must be one of {', '.join(STUDENT_TARGETS)}")
        at_least_one(s, self, "wrn_blocks", "steps", "mu")
        _require(0 <= self.threshold <= 1, s, "threshold", "must be in [0, 1]")
        _require(self.lambda_u >= 0, s, "lambda_u", "must be >= 0")
        _require(0 <= self.ema < 1, s, "ema", "must be in [0, 1)")
        _require(self.cutout >= 0, s, "cutout", "must be >= 0")
        _require(0 <= self.affine_degrees <= 90, s, "affine_degrees", "must be in [0, 90]")
        _require(self.warmup_steps >= 0, s, "warmup_steps", "must be >= 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """A whole run: one field per TOML section (the section registry), and `defaulted`: the
    ``"section.key"`` names the file and its overrides did not set (not a section: never
    written, hashed or compared). `pate.config.data_defaults` resolves those from the data's
    public shape; a config built in Python has none (every value counts as chosen)."""

    data: DataConfig = DataConfig()
    teachers: TeachersConfig = TeachersConfig()
    aggregation: AggregationConfig = AggregationConfig()
    fine_grained: FineGrainedConfig = FineGrainedConfig()
    features: FeaturesConfig = FeaturesConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    student: StudentConfig = StudentConfig()
    rounds: RoundsConfig = RoundsConfig()
    dpsgd: DpsgdConfig = DpsgdConfig()
    fedavg: FedavgConfig = FedavgConfig()
    synth: SynthConfig = SynthConfig()
    silos: SilosConfig = SilosConfig()
    defaulted: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False,
                                                  metadata={"section": False})
    #: The line that says which values the data chose (`pate.programs.data_facts.with_data_defaults`),
    #: printed by the step that does the work, not where the file is read: a refusal stays one line.
    data_note: str = dataclasses.field(default="", compare=False, repr=False, metadata={"section": False})


def section_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of `Config` that are TOML sections (not `Config.defaulted` nor `Config.data_note`)."""
    return tuple(f for f in dataclasses.fields(Config) if f.metadata.get("section", True))
