"""The `[silos]` config section (`pate silos run`: a fine-grained release across silos on Flower,
`pate.steps.label_silos`), in a module of its own so that `pate.config.sections` stays small; import
`SilosConfig` from here or from `pate.config`. Validated like every section: `validate()` names
the key at fault."""

from __future__ import annotations

import dataclasses
import math

from pate.config.checks import require
from pate.config.coordinator import coordinator_address

#: The most silos a release may span (Flower's SecAgg+ sums n inputs below its modulus, at most
#: 2^32: `pate.programs.secure_sum.SecAggRanges`; more silos leave fewer bits to each).
MAX_SILOS = 1024


def _require(ok: bool, key: str, message: str) -> None:
    require(ok, "silos", key, message)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SilosConfig:
    """`[silos]`: a fine-grained release (`[fine_grained]`, discrete Laplace noise) across
    `silos` parties on Flower (docs/silos.md). Each silo counts its own records' votes over the
    public pool and adds a share of the noise; Flower's SecAgg+ shows the coordinator the sum
    alone, which is released as the central release is, charged once.

    `needed` (h): the shares that must be present for the release, 1..silos (0: all of them).
    Each share is drawn for h parts, so h shares sum to the central noise; fewer are refused,
    nothing charged (`analysis.mechanisms.silos.check_shares_present`). `address`: the
    SuperLink's HOST:PORT (its one HTTP port in Flower 1.42: Fleet, Control and Runtime APIs),
    where `pate silos run` submits the release (without ``--silos``; with it, a local deployment
    on 127.0.0.1 on free ports). `root_certificates`: the CA bundle (PEM) that verifies the
    SuperLink's TLS certificate; "" connects without TLS (local runs, trusted networks).
    `records`: a public upper bound on the records of all silos together, which sizes the
    secure sum's modulus (0: the `[data]` train split's record count, read from a file header:
    the silos are slices of that one data set, the local deployment). `failure`: the
    probability, stated, that some cell's noisy total leaves the modulus's window and decodes
    wrong (utility only: the coordinator's view is the noisy histogram mod M either way).
    `timeout`: seconds to wait for the silos to join and for each stage of SecAgg+. `ledger`:
    the name of the ledger the coordinator charges (it holds no record, so it cannot know the
    data set by its records; "": ``silos:`` and the `[data]` set's name)."""

    silos: int = 3
    needed: int = 0
    address: str = "127.0.0.1:9092"
    root_certificates: str = ""
    records: int = 0
    failure: float = 1e-9
    timeout: float = 120.0
    ledger: str = ""

    def validate(self) -> None:
        _require(2 <= self.silos <= MAX_SILOS, "silos", f"must be 2..{MAX_SILOS} (SecAgg+ needs two parties at "
                 f"least), got {self.silos}")
        _require(0 <= self.needed <= self.silos, "needed", f"must be 0 (all) .. silos ({self.silos}), got {self.needed}")
        try:
            coordinator_address(self.address)
        except ValueError as err:
            _require(False, "address", f"must be the SuperLink's HOST:PORT: {err}")
        _require(self.root_certificates == self.root_certificates.strip() and self.root_certificates.isprintable(),
                 "root_certificates", "must be a path (one line) or \"\"")
        _require(self.records >= 0, "records", f"must be >= 0 (0: the [data] train split's count), got {self.records}")
        _require(0 < self.failure < 1, "failure", f"must lie in (0, 1), got {self.failure}")
        _require(0 < self.timeout <= 86400 and math.isfinite(self.timeout), "timeout",
                 f"must be a number of seconds in (0, 86400], got {self.timeout}")
        _require(self.ledger == self.ledger.strip() and self.ledger.isprintable() and len(self.ledger) <= 200,
                 "ledger", "must be one line of printable text of at most 200 characters, no space at either end")

    @property
    def shares_needed(self) -> int:
        """h: `needed`, or every silo when it is 0."""
        return self.needed or self.silos
