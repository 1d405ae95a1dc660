"""The baselines' config sections: `[dpsgd]` (`pate dpsgd`), `[fedavg]` (`pate fedavg`) and
`[synth]` (`pate synth`), each a frozen dataclass with its defaults and a `validate()` that names
the key at fault. `Config` (`pate.config.sections`) holds them; `pate.config` re-exports
`DpsgdConfig`, the others are imported from here."""

from __future__ import annotations

import dataclasses
from typing import Literal

from pate.config.checks import at_least_one, check_map, eps, positive, rate
from pate.config.checks import require as _require

#: The ``[fedavg] mechanism`` values whose noise is distributed shares under an exact secure sum
#: (`pate.baselines.fedavg.PLANS` builds their records): DP-FedSGD only.
DISTRIBUTED = ("ddg", "skellam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpsgdConfig:
    """`[dpsgd]`: the DP-SGD baseline `pate dpsgd` trains on the same private train split.

    DP-SGD (Abadi et al. 2016): each step Poisson-samples the private set (rate
    `batch_size / N`: `batch_size` is the expected batch), clips each example's
    gradient to L2 norm `clip_norm`, adds Gaussian noise of std `noise multiplier *
    clip_norm` (the multiplier calibrated so that `epochs` passes spend `eps` at
    `[privacy] delta` under `accountant`) and takes an SGD step with `momentum`.
    `relation` names the neighbouring relation `eps` is a target for: "add-remove"
    (the DP-SGD literature's, Tramer & Boneh's included) or "replace-one" (PATE's: set it
    to compare the two like for like; `analysis.baselines.sgd_accounting.calibrate_noise`).

    `model = "cnn"`: Tramer & Boneh's end-to-end CNN (tanh): convolutions of
    `conv_features` channels, kernels `conv_kernels`, strides `conv_strides`, zero
    padding `conv_padding`, each followed by a 2x2 stride-1 max pool; dense tanh
    layers `hidden`; a linear classifier. `model = "scatternet"`: fixed kymatio
    scattering features (`scattering_j` scales, `scattering_l` orientations), each
    example group-normalised over `groups` channel groups (no data statistics), then a
    linear classifier. `model = "linear"`: a linear classifier on the inputs as they are
    (a data set of embeddings' rows, or flattened pixels). Each model has its own
    `*_batch_size`, `*_learning_rate` and `*_epochs`. Per-example gradients are computed `microbatch` at a time.

    `features`: "" (the model sees the inputs as they are) or a public map as `[features] map`
    names them ("scattering", "learned+scattering", ...), as `[teachers] features` does: with
    `model = "linear"`, DP-SGD then trains a linear classifier on each input's coefficients under
    that map (`pate.programs.public_features.InputMap`, the teachers' view: no pool PCA; the
    scattering settings are `[fine_grained]`'s, a learned map's weights `[features] weights`),
    times one scale fitted on the public pool (its rows' mean squared coordinate to 1, the
    scale of the group-normalised ScatterNet features `clip_norm` and the learning rates were
    set for). The map and the scale are public, so each private example's row is a function of
    that example alone and the accounting is the same per-example clipping on the mapped rows.
    """

    model: Literal["cnn", "scatternet", "linear"] = "scatternet"
    features: str = ""
    eps: float = 3.0
    relation: Literal["add-remove", "replace-one"] = "add-remove"
    accountant: Literal["rdp", "pld"] = "rdp"
    clip_norm: float = 0.1
    momentum: float = 0.9
    microbatch: int = 256
    cnn_batch_size: int = 2048
    cnn_learning_rate: float = 4.0
    cnn_epochs: float = 40.0
    scatternet_batch_size: int = 8192
    scatternet_learning_rate: float = 8.0
    scatternet_epochs: float = 60.0
    linear_batch_size: int = 8192
    linear_learning_rate: float = 8.0
    linear_epochs: float = 60.0
    conv_features: tuple[int, ...] = (16, 32)
    conv_kernels: tuple[int, ...] = (8, 4)
    conv_strides: tuple[int, ...] = (2, 2)
    conv_padding: tuple[int, ...] = (2, 0)
    hidden: tuple[int, ...] = (32,)
    scattering_j: int = 2
    scattering_l: int = 8
    groups: int = 27
    eval_batch_size: int = 1000

    def validate(self) -> None:
        s = "dpsgd"
        eps(s, self, "eps")
        if self.features:
            check_map(s, "features", self.features)
            _require(self.model == "linear", s, "features", f"= {self.features!r} gives DP-SGD rows of features for a "
                     f"linear classifier, but dpsgd.model = {self.model!r}; set dpsgd.model = \"linear\" (or "
                     "dpsgd.features = \"\" for the model's own inputs)")
        positive(s, self, "clip_norm")
        _require(0 <= self.momentum < 1, s, "momentum", "must be in [0, 1)")
        at_least_one(s, self, "microbatch")
        for m in ("cnn", "scatternet", "linear"):
            b, lr, ep = (getattr(self, f"{m}_{k}") for k in ("batch_size", "learning_rate", "epochs"))
            _require(b >= 1, s, f"{m}_batch_size", f"must be >= 1, got {b}")
            rate(s, self, f"{m}_learning_rate")
            _require(ep > 0, s, f"{m}_epochs", f"must be > 0, got {ep}")
        _require(len(self.conv_features) >= 1 and all(f >= 1 for f in self.conv_features), s,
                 "conv_features", "must be one or more positive channel counts")
        for key in ("conv_kernels", "conv_strides", "conv_padding"):
            values = getattr(self, key)
            _require(len(values) == len(self.conv_features), s, key,
                     f"must have one entry per layer of conv_features ({len(self.conv_features)}), "
                     f"got {list(values)}")
        _require(all(k >= 1 for k in self.conv_kernels), s, "conv_kernels", "must be positive")
        _require(all(k >= 1 for k in self.conv_strides), s, "conv_strides", "must be positive")
        _require(all(k >= 0 for k in self.conv_padding), s, "conv_padding", "must be >= 0")
        _require(all(h >= 1 for h in self.hidden), s, "hidden", "must be positive widths")
        at_least_one(s, self, "scattering_j", "scattering_l", "groups")
        _require(self.eval_batch_size >= 1, s, "eval_batch_size", "must be >= 1")

    def training(self, model: str | None = None) -> tuple[int, float, float]:
        """(expected batch size, learning rate, epochs) of `model` (default: `self.model`)."""
        m = model or self.model
        return (getattr(self, f"{m}_batch_size"), getattr(self, f"{m}_learning_rate"),
                getattr(self, f"{m}_epochs"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class FedavgConfig:
    """`[fedavg]`: federated learning with output perturbation (`pate fedavg`) on the
    same private train split, each client a shard of it.

    `clients = 0`: the teachers' partition (`teachers.num_teachers` shards cut with
    `teachers.seed`), so PATE and FL see the same shards; P > 0: the same permutation cut
    into P shards (when P divides the teachers' count and the count divides the split,
    each client holds whole teacher shards). `algorithm`: "fedavg" (each round every client
    takes `local_steps` full-batch steps of plain gradient descent at `learning_rate` with
    every per-example gradient clipped to `clip_norm`, and sends its model; the server
    averages) or "iadmm" (inexact ADMM with penalty `rho`: one linearised step, the dual
    updated from the noisy messages). `mechanism`: "laplace" (l1 clipping, Laplace noise)
    or "gaussian" (l2 clipping, Gaussian noise) on every value a client sends, calibrated
    so that `rounds` rounds cost `eps` in total at `[privacy] delta` (replace-one).
    `model`: "linear" (softmax regression on the pixels, clamped to [0, 1]) or
    "scatternet" (on the ScatterNet features of `[dpsgd]`'s `scattering_j`,
    `scattering_l`, `groups`). `pca` > 0 projects those inputs onto the top `pca`
    principal directions of the *public pool* (centred at the pool's mean, divided by the
    pool's mean l1 norm: public values only; the projection is saved with the model); with
    `whiten = true`, each direction divided by the pool's standard deviation along it instead
    (every projected coordinate of the pool has variance 1).
    `grid = K` > 0: messages released exactly on a public grid of Δ₁/(K d) with discrete
    Laplace noise (Laplace) or of Δ₂/(K √d) with discrete Gaussian noise (Gaussian); 0: float64
    noise. `analysis/baselines/fedavg_privacy.py` derives all that. `mechanism = "ddg"` or `"skellam"`
    (FedAvg, `local_steps = 1`: DP-FedSGD): no message is noised on its own; each client sends its
    records' clipped gradients, quantised at resolution `grid = K` >= 1 and summed, plus a share of
    noise (ddg: exact discrete Gaussian, recommended; skellam: Poisson − Poisson from numpy's
    float64 sampler), through an exact secure sum whose total is one central release
    (`analysis/mechanisms/ddg.py`, `analysis/mechanisms/skellam.py`).
    `server_momentum = β` in [0, 1) (FedAvg only): the server moves by v ← βv + (w − mean of
    the noisy messages), w ← w − v (FedAvgM, Hsu, Qi & Brown 2019); post-processing of the
    released messages, so the cost is the same for every β; 0: plain averaging.
    """

    algorithm: Literal["fedavg", "iadmm"] = "fedavg"
    mechanism: Literal["laplace", "gaussian", "skellam", "ddg"] = "laplace"
    model: Literal["linear", "scatternet"] = "linear"
    eps: float = 3.0
    rounds: int = 50
    clients: int = 0
    local_steps: int = 1
    learning_rate: float = 1.0
    clip_norm: float = 1.0
    rho: float = 1.0
    pca: int = 0
    whiten: bool = False
    grid: int = 100
    server_momentum: float = 0.0
    eval_batch_size: int = 1000

    def validate(self) -> None:
        s = "fedavg"
        _require(0.0 <= self.server_momentum < 1.0, s, "server_momentum",
                 f"must lie in [0, 1) (0: plain averaging), got {self.server_momentum}")
        _require(self.server_momentum == 0.0 or self.algorithm == "fedavg", s, "server_momentum",
                 "applies to algorithm = \"fedavg\" only (IADMM's server step is its dual update); set it to 0")
        eps(s, self, "eps")
        rate(s, self, "learning_rate", "rho")
        positive(s, self, "clip_norm")
        at_least_one(s, self, "rounds")
        _require(self.clients >= 0, s, "clients", f"must be >= 0 (0: the teachers' partition), got {self.clients}")
        at_least_one(s, self, "local_steps")
        _require(self.pca >= 0, s, "pca", f"must be >= 0 (0: no projection), got {self.pca}")
        _require(not self.whiten or self.pca > 0, s, "whiten", "applies to a projection (fedavg.pca > 0); set it "
                 "to false or choose fedavg.pca")
        _require(self.grid >= 0, s, "grid", f"must be >= 0 (0: float64 noise, no grid), got {self.grid}")
        if self.mechanism in DISTRIBUTED:  # distributed shares of one central release: DP-FedSGD only
            m = self.mechanism
            _require(self.algorithm == "fedavg", s, "algorithm",
                     f"must be \"fedavg\" with mechanism = \"{m}\" (the secure sum adds gradients; IADMM's "
                     "messages carry a dual)")
            _require(self.local_steps == 1, s, "local_steps",
                     f"must be 1 with mechanism = \"{m}\" (DP-FedSGD: the sensitivity is one step's), got "
                     f"{self.local_steps}")
            _require(self.grid >= 1, s, "grid", f"must be >= 1 with mechanism = \"{m}\" (the quantisation's "
                     "resolution K)")
        _require(self.eval_batch_size >= 1, s, "eval_batch_size", "must be >= 1")


def _synth_require(ok: bool, key: str, message: str) -> None:
    _require(ok, "synth", key, message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """`[synth]`: the synthetic-data generator of `pate synth` (`pate.baselines.synth`).

    `method`: "merf" (DP-MERF, `pate.baselines.merf_generator`: the private class-conditional mean
    embedding of `merf_features` random Fourier features, kernel length-scale
    `merf_length_scale` (0: the public pool's median distance), released once with
    discrete Gaussian noise calibrated to `eps` at `[privacy] delta`; the generator then
    takes `merf_steps` Adam steps at `merf_learning_rate` on batches of
    `merf_batch_size`) or "gan" (the PATE-GAN below).

    PATE-GAN (`pate.baselines.pate_gan`): `teachers` teacher
    discriminators (0: `teachers.num_teachers`) on the teachers' partition (cut with
    `teachers.seed`); `steps` steps, each `teacher_steps` Adam steps of every teacher on
    `real_batch_size` points of its own shard against as many generated ones, then the
    noisy GNMax vote on `batch_size` generated points (the queries: steps x batch_size,
    fixed before training; sigma calibrated to `eps` at `[privacy] delta`), `student_steps`
    of the student on those votes and one generator step. Class-conditional, classes drawn
    uniformly (a public prior: no label count is read). MLPs of widths
    `generator_hidden` / `discriminator_hidden`, latent `latent_dim`, Adam at
    `learning_rate`. `samples` synthetic points are released and scored by a logistic
    regression and the `[dpsgd]` CNN trained `eval_epochs` on them (batch
    `eval_batch_size`, Adam at `eval_learning_rate`). `seed`: initialisation, latents, batches.

    The public-pool PATE-GAN (`public_real = true`): the student is two discriminators, one
    without class input trained on the public pool's unlabelled images (real) against
    generated ones, one conditional trained on every noisy vote released so far; each step
    (`warmup_steps` steps without a query first, then `steps` with one) takes `gan_steps`
    student-and-generator updates, the generator fooling both. `teacher_fakes`: what the
    teachers learn to call fake: "generated" (Jordon et al.), "mismatched" (their own images
    under a wrong class: a class-consistency judge) or "both". Public data and post-processing
    only: the queries, and so the privacy cost, stay `steps` x `batch_size`.
    """

    method: Literal["merf", "gan"] = "merf"
    eps: float = 1.0
    merf_features: int = 4000
    merf_length_scale: float = 0.0
    merf_steps: int = 2000
    merf_batch_size: int = 500
    merf_learning_rate: float = 0.01
    teachers: int = 0
    steps: int = 500
    batch_size: int = 64
    real_batch_size: int = 64
    teacher_steps: int = 1
    student_steps: int = 1
    latent_dim: int = 64
    generator_hidden: tuple[int, ...] = (256, 512)
    discriminator_hidden: tuple[int, ...] = (128,)
    learning_rate: float = 0.0002
    samples: int = 10000
    eval_epochs: int = 10
    eval_batch_size: int = 128
    eval_learning_rate: float = 0.001
    seed: int = 0
    public_real: bool = False
    gan_steps: int = 1
    warmup_steps: int = 0
    teacher_fakes: Literal["generated", "mismatched", "both"] = "generated"

    def validate(self) -> None:
        _synth_require(self.method in ("merf", "gan"), "method",
                 f"must be \"merf\" or \"gan\", got {self.method!r}")
        _synth_require(2 <= self.merf_features <= 2**20 and self.merf_features % 2 == 0, "merf_features",
                 f"must be an even number in [2, 1048576], got {self.merf_features}")
        _synth_require(0 <= self.merf_length_scale < float("inf"), "merf_length_scale",
                 f"must be >= 0 (0: the public pool's median distance), got {self.merf_length_scale}")
        eps("synth", self, "eps")
        rate("synth", self, "learning_rate", "eval_learning_rate", "merf_learning_rate")
        _synth_require(self.teachers >= 0, "teachers", f"must be >= 0 (0: teachers.num_teachers), got {self.teachers}")
        at_least_one("synth", self, "merf_steps", "merf_batch_size", "steps", "batch_size", "real_batch_size", "teacher_steps", "student_steps", "latent_dim", "samples", "eval_epochs", "eval_batch_size")
        for key in ("generator_hidden", "discriminator_hidden"):
            _synth_require(all(h >= 1 for h in getattr(self, key)), key, "must be positive widths")
        _synth_require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        at_least_one("synth", self, "gan_steps")
        _synth_require(self.warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {self.warmup_steps}")
        _synth_require(self.teacher_fakes in ("generated", "mismatched", "both"), "teacher_fakes",
                       f"must be \"generated\", \"mismatched\" or \"both\", got {self.teacher_fakes!r}")
        _synth_require(self.public_real or (self.gan_steps == 1 and self.warmup_steps == 0), "gan_steps",
                       "gan_steps > 1 and warmup_steps > 0 need public_real = true (without the public pool "
                       "the student has nothing to train on between votes)")
