"""The `[fedavg]` config section (`pate fedavg`), in a module of its own so that
`pate.config_sections` stays small; import `FedavgConfig` from here (not re-exported).
Validated like every section: `validate()` names the key at fault."""

from __future__ import annotations

import dataclasses
from typing import Literal

from pate.config_rules import require as _require


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
    pool's mean l1 norm: public values only; the projection is saved with the model).
    `grid = K` > 0 (Laplace): messages released exactly on a public grid of Δ/(K d) with
    discrete Laplace noise; 0: float64 Laplace. `analysis/fedavg_privacy.py` derives all that.
    """

    algorithm: Literal["fedavg", "iadmm"] = "fedavg"
    mechanism: Literal["laplace", "gaussian"] = "laplace"
    model: Literal["linear", "scatternet"] = "linear"
    eps: float = 3.0
    rounds: int = 50
    clients: int = 0
    local_steps: int = 1
    learning_rate: float = 1.0
    clip_norm: float = 1.0
    rho: float = 1.0
    pca: int = 0
    grid: int = 100
    eval_batch_size: int = 1000

    def validate(self) -> None:
        s = "fedavg"
        for key in ("eps", "learning_rate", "clip_norm", "rho"):
            value = getattr(self, key)
            _require(value > 0 and value != float("inf"), s, key, f"must be a positive number, got {value}")
        _require(self.rounds >= 1, s, "rounds", f"must be >= 1, got {self.rounds}")
        _require(self.clients >= 0, s, "clients", f"must be >= 0 (0: the teachers' partition), got {self.clients}")
        _require(self.local_steps >= 1, s, "local_steps", f"must be >= 1, got {self.local_steps}")
        _require(self.pca >= 0, s, "pca", f"must be >= 0 (0: no projection), got {self.pca}")
        _require(self.grid >= 0, s, "grid", f"must be >= 0 (0: float64 Laplace, no grid), got {self.grid}")
        _require(self.eval_batch_size >= 1, s, "eval_batch_size", "must be >= 1")
