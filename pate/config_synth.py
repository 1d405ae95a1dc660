"""The `[synth]` config section (`pate synth`, the PATE-GAN), in a module of its own so
that `pate.config_sections` stays small; import `SynthConfig` from here. Validated like
every section: `validate()` names the key at fault."""

from __future__ import annotations

import dataclasses
from typing import Literal

from pate.config_rules import require


def _require(ok: bool, key: str, message: str) -> None:
    require(ok, "synth", key, message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """`[synth]`: the synthetic-data generator of `pate synth` (`pate.steps.synth`).

    `method`: "merf" (DP-MERF, `pate.synth_merf`: the private class-conditional mean
    embedding of `merf_features` random Fourier features, kernel length-scale
    `merf_length_scale` (0: the public pool's median distance), released once with
    discrete Gaussian noise calibrated to `eps` at `[privacy] delta`; the generator then
    takes `merf_steps` Adam steps at `merf_learning_rate` on batches of
    `merf_batch_size`) or "gan" (the PATE-GAN below).

    PATE-GAN (`pate.synth_gan`): `teachers` teacher
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

    def validate(self) -> None:
        _require(self.method in ("merf", "gan"), "method",
                 f"must be \"merf\" or \"gan\", got {self.method!r}")
        _require(2 <= self.merf_features <= 2**20 and self.merf_features % 2 == 0, "merf_features",
                 f"must be an even number in [2, 1048576], got {self.merf_features}")
        _require(0 <= self.merf_length_scale < float("inf"), "merf_length_scale",
                 f"must be >= 0 (0: the public pool's median distance), got {self.merf_length_scale}")
        for key in ("eps", "learning_rate", "eval_learning_rate", "merf_learning_rate"):
            value = getattr(self, key)
            _require(0 < value < float("inf"), key, f"must be a positive number, got {value}")
        _require(self.teachers >= 0, "teachers", f"must be >= 0 (0: teachers.num_teachers), got {self.teachers}")
        for key in ("merf_steps", "merf_batch_size", "steps", "batch_size", "real_batch_size", "teacher_steps",
                    "student_steps", "latent_dim",
                    "samples", "eval_epochs", "eval_batch_size"):
            _require(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        for key in ("generator_hidden", "discriminator_hidden"):
            _require(all(h >= 1 for h in getattr(self, key)), key, "must be positive widths")
        _require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
