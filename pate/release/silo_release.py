"""A fine-grained release across silos (`pate silos run`, docs/silos.md): each silo counts its
own records' votes and adds a share of the noise; the coordinator sees the sum alone (Flower's
SecAgg+, `pate.programs.secure_sum`) and releases it as the central release is released.

The parties and what each computes, private values in capitals:

- **the plan** (`plan_of`, every party, public values only): the discrete Laplace of the central
  release (`fine_grained_release.noise_of`: scale b = 2k/ε), the shares needed h (`[silos]
  needed`), the modulus M that never wraps (`analysis.mechanisms.silos.wrap_free_modulus` for
  N = `[silos] records` records, n silos, pool × classes cells) and SecAgg+'s ranges for it
  (`pate.programs.secure_sum.SecAggRanges`); its digest is what the coordinator sends and every
  silo checks against its own config, so a coordinator cannot ask a silo for less noise;
- **a silo** (`silo_input`): the public map fitted on the pool (as every party fits it), the
  PRIVATE vote counts H_i of its own records (`fine_grained_release.slice_counts`, the central
  release's counting), plus its share Z_i = Y − Y', Y, Y' ~ NB(1/h, e^{−1/b}) drawn exactly from
  128-bit OS entropy (`analysis.core.shares.laplace_share`), reduced mod M: y_i = (H_i + Z_i) mod
  M. Only y_i leaves the silo, masked by SecAgg+;
- **the coordinator** (`release_total`): Σ y_i mod M over the m silos present, refused unless each
  silo named itself once and m >= h (`analysis.mechanisms.silos.check_shares_present`: nothing
  charged), decoded to the integers Σ H_i + Σ Z_i (`analysis.mechanisms.silos.decode`), labelled
  by the central release's post-processing (`fine_grained_release.labelled`).

**Formal guarantee.** With m >= h shares present, Σ Z_i is a discrete Laplace of scale b plus,
for m > h, independent noise (`analysis.core.shares`: h shares of NB(1/h) sum to the geometric
law exactly), and Σ H_i is the histogram of every record (each counted by the one silo holding
it), so the decoded total has exactly the law of the central release, or is post-processing of
it: pure ε = 2k/b under replace-one (`analysis.mechanisms.fine_grained`, the geometric mechanism).
The coordinator's view, the total mod M, is a function of that total, so the guarantee holds
whether or not a cell wraps (a wrap, probability <= `[silos] failure`, only mislabels). The
ledger is charged once, for that ε, by the coordinator.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from analysis.core.shares import laplace_share
from analysis.mechanisms import fine_grained
from analysis.mechanisms import silos as silos_mod
from pate.config import Config, config_to_dict
from pate.programs.secure_sum import MAX_MODULUS_RANGE, SecAggRanges, SecureSum
from pate.release import fine_grained_release as fine_release


#: `[features]` keys that are a party's own paths (a learned map's weights, Coates-Ng's filters),
#: left out of the plan: each host keeps them where it likes. A silo on other weights votes for
#: other pool points, which changes the labels' quality, never the guarantee (the sensitivity
#: holds for any public map).
LOCAL_PATHS = ("weights", "filters")


@dataclasses.dataclass(frozen=True)
class SiloPlan:
    """The public plan every party of a release across silos computes alike (module docstring)."""

    noise: fine_grained.Noise
    silos: int
    needed: int
    records: int
    pool_size: int
    num_classes: int
    modulus: silos_mod.Modulus
    ranges: SecAggRanges
    pool_sha256: str
    settings: dict

    @property
    def cells(self) -> int:
        return self.pool_size * self.num_classes

    def digest(self) -> str:
        """sha256 of every public value the plan fixes (the noise, the shares, the modulus and
        ranges, the pool, the map and release settings): what silos and coordinator agree on."""
        doc = {"noise": [self.noise.kind, str(self.noise.parameter), self.noise.votes, self.noise.relation],
               "silos": self.silos, "needed": self.needed, "records": self.records, "pool_size": self.pool_size,
               "num_classes": self.num_classes, "modulus": dataclasses.asdict(self.modulus),
               "ranges": dataclasses.asdict(self.ranges), "pool_sha256": self.pool_sha256, "settings": self.settings}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def describe(self) -> str:
        b = self.noise.parameter
        return (f"silos: {self.silos}, shares needed {self.needed}; each adds NB(1/{self.needed}) - NB(1/{self.needed}) "
                f"noise of scale {b} (their sum: the central discrete Laplace, eps {self.noise.eps():.6g}); secure "
                f"sum mod {self.modulus.modulus} ({self.records} records at most, a wrap below probability "
                f"{self.modulus.failure:.2g})")


def plan_of(config: Config, pool) -> SiloPlan:
    """The plan of `config` over the public pool `pool` (`pate.data.load_public`: no private
    record read). Refused in one line: noise other than the discrete Laplace (shares sum to it
    alone), or a modulus SecAgg+ cannot carry."""
    cfg, s = config.fine_grained, config.silos
    if cfg.noise != "laplace":
        raise PateError('a release across silos splits the discrete Laplace: set fine_grained.noise = "laplace" '
                        "(shares of a discrete Gaussian do not sum to one)")
    if cfg.auto:
        raise PateError(f"a release across silos needs fine_grained.{', '.join(cfg.auto)} set in every party's config "
                        "(the silos count with one k, agreed before the round): choose them with `pate ceiling --tune` "
                        "rather than at release time")
    fine_release.check_pool_fit(cfg, int(pool.pool_x.shape[0]))
    noise = fine_release.noise_of(cfg, config.privacy.delta)
    records = int(s.records or pool.train_size)
    if records < 1:
        raise PateError("[silos] records must bound the silos' records (the [data] train split is empty)")
    pool_size, classes = int(pool.pool_x.shape[0]), int(pool.num_classes)
    needed = s.shares_needed
    modulus = silos_mod.wrap_free_modulus(records, noise, s.silos, pool_size * classes, failure=s.failure,
                                          needed=needed, max_modulus=(MAX_MODULUS_RANGE - 1) // (2 * s.silos))
    ranges = SecAggRanges.for_modulus(modulus.modulus, s.silos)
    whole = config_to_dict(config)
    features = {k: v for k, v in whole["features"].items() if k not in LOCAL_PATHS}
    settings = {"fine_grained": whole["fine_grained"], "features": features,
                "public_size": config.data.public_size, "relation": noise.relation}
    pool_sha = hashlib.sha256(np.ascontiguousarray(pool.pool_x).tobytes()).hexdigest()
    return SiloPlan(noise, s.silos, needed, records, pool_size, classes, modulus, ranges, pool_sha, settings)


def check_plan(plan: SiloPlan, asked: object, silo: int) -> None:
    """A silo refuses a coordinator whose plan (its digest, `asked`) is not the one this silo's own
    config makes: a silo adds the noise its own config asks for, or nothing."""
    if asked != plan.digest():
        raise PateError(f"silo {silo}: the coordinator's plan is not this silo's (noise, shares, modulus, pool, map "
                        "and release settings must agree: the same [fine_grained], [features], [silos] and public "
                        "pool everywhere); this silo sends nothing")


def silo_input(config: Config, plan: SiloPlan, splits, start: int, source: NoiseSource, echo=print) -> np.ndarray:
    """What a silo sends into the secure sum: (H_i + Z_i) mod M, int64 of shape (pool, classes)
    (module docstring). `splits` hold this silo's own records only (its train split) and the
    public pool; `start` is their first record's number in the data set they are slices of (0
    for a silo's own data set), so each is mapped as in any layout; `source` draws the share
    (``NoiseSource()``: OS entropy). Refused in one line: more records than the plan bounds."""
    cfg = config.fine_grained
    held = int(splits.train_x.shape[0])
    if held > plan.records:
        raise PateError(f"this silo holds {held} records, more than the {plan.records} the plan bounds all silos' "
                        "records by ([silos] records): the secure sum could wrap")
    fine_release.check_settings(config, int(splits.pool_x.shape[0]), splits.train_x)
    side = fine_release.public_side(config, splits.pool_x, splits.num_classes, plan.noise, echo)
    counts = fine_release.slice_counts(side, cfg, splits.train_x, splits.train_y, start, fine_release.rr_source(None))
    share = laplace_share(source, plan.noise.parameter, plan.needed, counts.shape)
    return np.mod(counts + share, plan.modulus.modulus)  # the PRIVATE counts and share end here


def check_silos_named(named: tuple[int, ...], silos: int) -> None:
    """Each silo answered once: an index named twice would count a silo's records twice (twice the
    sensitivity the noise was planned for), one outside 0..n-1 belongs to no planned silo."""
    seen = set()
    for index in named:
        if not 0 <= index < silos:
            raise PateError(f"a silo named itself {index}, outside 0..{silos - 1}: nothing was released or charged")
        if index in seen:
            raise PateError(f"silo {index} answered twice (two SuperNodes with one index): its records would count "
                            "twice; nothing was released or charged")
        seen.add(index)


def release_total(side: fine_release.PublicSide, config: Config, plan: SiloPlan,
                  total: SecureSum) -> fine_release.FineGrainedRelease:
    """The release from the secure sum (module docstring): refused, nothing charged, unless every
    silo present named itself once and at least `plan.needed` shares are present."""
    check_silos_named(total.silos, plan.silos)
    silos_mod.check_shares_present(total.present, plan.needed)
    noisy = silos_mod.decode(total.residues.reshape(plan.pool_size, plan.num_classes), plan.modulus)
    return fine_release.labelled(side, config.fine_grained, config.privacy.delta, noisy.astype(np.int64))
