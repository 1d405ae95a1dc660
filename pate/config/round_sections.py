"""The `[rounds]` config section (`pate label --round 2`, `rounds = 2` in `pate run`), in a
module of its own so that `pate.config.sections` stays small; import `RoundsConfig` from
here. Validated like every section: `validate()` names the key at fault."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from pate.config.checks import at_least_one, positive, require


def _require(ok: bool, key: str, message: str) -> None:
    require(ok, "rounds", key, message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoundsConfig:
    """`[rounds]`: the 2018 paper's interactive setting (`pate label --round 2`). With
    `rounds` = 2, round 2 queries `queries` pool points not queried in round 1, the most
    unsure of the round-1 student first (`select`: "uncertain" = lowest top probability,
    "margin" = smallest gap between the top two; "next" = the next points in pool
    order, the non-interactive baseline), and its teachers are ridge heads
    (penalty `ridge`) on the round-1 student's features reduced to `pca_dim` dimensions
    by a PCA of the public pool; each on its round-1 teacher's shard.

    With `[privacy] target_eps` and two rounds, round 1 is planned for `round1_target_eps`
    (0: the whole target, leaving round 2 what round 1's releases left), and round 2 asks at
    most `queries`, as many as keep the published headline of both rounds (the
    data-independent composition of every release: `analysis.planning.rounds`) within the target,
    exactly (`pate.release.target.choose_round2`).
    Without a target round 2 asks `queries` at most, as many as round 1 left unqueried.

    With `check` = "interactive" the teachers answer where they outvote the round-1 student
    (Interactive-GNMax, the 2018 paper's Algorithm 2; `analysis.bounds.interactive`): Confident-GNMax's
    threshold step tests max_j (n_j − ⌊T·p_j⌋) + N(0, σ₁²) ≥ threshold, p the student's
    probabilities on the query, so privacy is spent mainly where the student is wrong
    ("none": the plain threshold max_j n_j). It needs `[aggregation]` confident-gnmax and
    is planned for `[privacy] target_eps` with a public model of the student (its offsets, its
    calibration on the evaluation split).

    The student of both rounds (`pate train-student` after round 2) starts from the
    round-1 student's weights when `student_init` = "round1" (public: post-processing of
    round 1's release) and trains `student_steps` steps (0: `[student] steps`)."""

    rounds: int = 1
    queries: int = 800
    select: Literal["uncertain", "margin", "next"] = "uncertain"
    pca_dim: int = 256
    ridge: float = 10.0
    round1_target_eps: float = 0.0
    student_init: Literal["scratch", "round1"] = "scratch"
    student_steps: int = 0
    check: Literal["none", "interactive"] = "none"

    def validate(self) -> None:
        _require(self.rounds in (1, 2), "rounds", f"must be 1 or 2, got {self.rounds}")
        at_least_one("rounds", self, "queries", "pca_dim")
        positive("rounds", self, "ridge")
        _require(0 <= self.round1_target_eps < math.inf, "round1_target_eps",
                 f"must be >= 0 (0: round 1 plans for the whole target), got {self.round1_target_eps}")
        _require(self.student_steps >= 0, "student_steps",
                 f"must be >= 0 (0: [student] steps), got {self.student_steps}")
