"""`pate silos run`: a fine-grained release across silos on Flower (docs/silos.md), one central
release charged once by the coordinator, and each share by the silo that sends it.

Three parts, each a function here:

- `ready` and `contribute`, the body of every silo's ClientApp (`client_app`, on a SuperNode):
  reads its own config (the SuperNode's node config ``pate_config``) and only its own records
  (its config's train split, or with ``slice`` its ``silo``-th slice of it); at SecAgg+'s setup
  message (`ready`, before any silo sends an input) checks the coordinator's plan against its
  own and its records' ledger's budget (`pate.release.silo_ledger`); asked for its input
  (`contribute`), checks the plan again, computes (H_i + Z_i) mod M
  (`pate.release.silo_release.silo_input`), charges its records' ledger and returns it, which
  Flower's SecAgg+ mod masks before it leaves;
- `coordinate`, the body of the coordinator's ServerApp (`server_app`, run by the SuperLink):
  the public plan and pool only (`pate.data.load_public`: it opens no private record), the run
  directory's door (lock, staging), the ledger's budget, one SecAgg+ round
  (`pate.programs.secure_sum`), the release of the sum as the central fine-grained release
  (`pate.release.silo_release.release_total`: one line and nothing charged when a share is
  missing), labels.npz, and ONE ledger charge for the central ε on commit;
- `run`, the `pate silos run` command: the plan checked before any process starts, then either a
  local deployment (`silos`: a SuperLink and N SuperNodes on 127.0.0.1,
  `pate.programs.flower_deploy.LocalDeployment`) or the SuperLink at `[silos] address`, the run
  submitted with `flwr run`, and the coordinator's outcome read back.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.core.errors import PateError
from pate.config import Config
from pate.programs import secure_sum, silo_party
from pate.store.identity import SILOS_META


def public_plan(config: Config):
    """The public pool (`pate.data.load_public`: no private record) and the plan on it."""
    from pate.data import load_public
    from pate.programs.public_features import MapSettings, check_ready
    from pate.release.silo_release import plan_of

    check_ready(config.features.map, MapSettings.of(config))  # before any data is read
    pool = load_public(config.data)
    return pool, plan_of(config, pool)


# --------------------------------------------------------------------------- a silo


def ready(node: dict, setup_config: dict) -> None:
    """A silo's word before the round (SecAgg+'s setup message, before any silo sends an input:
    a refusal here costs no silo anything): refused, one line, when the coordinator's plan (its
    digest in `setup_config`) is not this silo's, or when one more share would take its records'
    ledger past its budget (`pate.release.silo_ledger.check_budget`)."""
    from pate.release import silo_ledger
    from pate.release.silo_release import check_plan

    config, silo, _rows, own = silo_party.own_records(node)
    _pool, plan = public_plan(config)
    check_plan(plan, setup_config.get("plan"), silo)
    silo_ledger.check_budget(config, silo, own)


def contribute(node: dict, fit_config: dict, echo=print):
    """A silo's part of the round (module docstring): ``(residues, ranges, silo index)``, its
    share charged to its own records' ledger right before it leaves
    (`pate.release.silo_ledger.charge_share`). `node` is the SuperNode's node config,
    `fit_config` the coordinator's word (the plan's digest)."""
    from analysis.core.noise import NoiseSource
    from pate.release import silo_ledger
    from pate.release.silo_release import check_plan, silo_input

    config, silo, rows, own = silo_party.own_records(node)
    _pool, plan = public_plan(config)
    check_plan(plan, fit_config.get("plan"), silo)
    splits = silo_party.own_splits(config, rows)
    echo(f"silo {silo}: {len(rows)} records of its own, a share of 1/{plan.needed} of the noise")
    residues = silo_input(config, plan, splits, rows.start, NoiseSource(), echo)
    entry = silo_ledger.charge_share(config, plan, silo, splits, own)  # the share is released from here on
    echo(f"silo {silo}: charged eps {entry['mechanism']['eps']:.6g} to the ledger of its records")
    return residues, plan.ranges, silo


def _client(context, fit_config: dict):
    return contribute(dict(context.node_config), fit_config, echo=lambda _line: None)


def _ready(context, setup_config: dict) -> None:
    ready(dict(context.node_config), setup_config)


# --------------------------------------------------------------------------- the coordinator


@dataclasses.dataclass(frozen=True)
class SilosResult:
    """What the coordinator released (the pool's labels are known in benchmarks)."""

    silos: int
    present: int
    eps: float
    label_accuracy: float

    def summary(self) -> str:
        return (f"released: every pool point labelled from {self.present} silos' secure sum, eps {self.eps:.6g} "
                f"(one charge)\naccuracy of released labels (pool): {self.label_accuracy:.4f}")


def coordinate(config: Config, workdir, grid, context, *, overwrite: bool = False, echo=print) -> SilosResult:
    """The coordinator's release (module docstring). `grid` reaches the silos (a SuperLink's,
    or any Flower Grid); `context` is the ServerApp's.

    Raises:
      PateError: a bad plan, budget or run directory (before any silo is asked); a silo that
        refuses, fails, drops or is missing, or a share short (nothing released or charged).
    """
    from pate.release import fine_grained_release as fine_release
    from pate.release.labels import check_run_ledger, content_digest, read_labels
    from pate.release.silo_release import release_total
    from pate.store import ledger as ledger_mod
    from pate.store import rundir
    from pate.store.door import step

    pool, plan = public_plan(config)
    p, s = config.privacy, config.silos
    with step("label-silos", workdir, config=config, overwrite=overwrite, echo=echo) as door:
        cost = plan.noise.cost()
        book = silo_party.coordinator_ledger(config)
        check_run_ledger(book, door.run.path)
        book.check_budget([cost], p.total_budget, p.delta, "this release across silos")
        echo(plan.describe())
        side = fine_release.public_side(config, pool.pool_x, pool.num_classes, plan.noise, echo)
        watched = silo_party.Watched(grid)
        nodes = secure_sum.wait_for_silos(watched, plan.silos, s.timeout, "the SuperLink")
        try:
            total = secure_sum.secure_sum(watched, context, nodes=nodes, ranges=plan.ranges, needed=plan.needed,
                                          timeout=s.timeout, fit_config={"plan": plan.digest()},
                                          setup_config={"plan": plan.digest()})
        except PateError as err:
            raise PateError(silo_party.with_silo_errors(str(err), watched.errors)) from None
        if total.present < plan.silos and watched.errors:
            echo(f"silos that failed: {'; '.join(watched.errors)}")
        made = release_total(side, config, plan, total)
        record = {"silos": plan.silos, "needed": plan.needed, "present": total.present,
                  "modulus": plan.modulus.modulus, "wrap_probability": plan.modulus.failure}
        door.out.write_npz(rundir.LABELS_NPZ, made.arrays, config,
                           meta={"ledger": book.public_name(), SILOS_META: record})
        describe = (f"labels: every pool point ({plan.pool_size}) from one fine-grained release across {plan.silos} "
                    f"silos (secure sum, {total.present} shares of {plan.needed} needed), laplace noise, "
                    f"eps {made.eps:.6g}")
        door.charge(book, "labels", cost, run=door.run.path, budget=p.total_budget, delta=p.delta,
                    mechanism={"name": made.record.name, "noise": made.noise.kind, "eps": made.eps,
                               "votes_per_record": made.noise.votes, "describe": describe, SILOS_META: plan.silos,
                               **fine_release.label_dp_record(made.arrays)},
                    subject=content_digest(read_labels(door.out / rundir.LABELS_NPZ)),
                    release=ledger_mod.release_identity("labels", door.out / rundir.LABELS_NPZ))
    echo(ledger_mod.cumulative_line(book, p.delta))
    result = SilosResult(plan.silos, total.present, made.eps, float(np.mean(made.arrays["labels"] == pool.pool_y)))
    echo(result.summary())
    echo(f"wrote {door.run / rundir.LABELS_NPZ} (the release: every pool point labelled); `pate analyze` writes its "
         "report")
    return result


#: The Flower components the submitted App names (`pate.programs.flower_deploy`): Flower's own
#: ServerApp (the coordinator, `coordinate`) and ClientApp (a silo, `contribute`, inside SecAgg+'s
#: mod). Importing this module imports Flower.
server_app = silo_party.server_app(coordinate)
client_app = secure_sum.client_app(_client, _ready)
_SERVER, _CLIENT = f"{__name__}:server_app", f"{__name__}:client_app"


# --------------------------------------------------------------------------- pate silos run


def run(config: Config, workdir, *, silos: int | None = None, overwrite: bool = False, echo=print) -> None:
    """`pate silos run` (module docstring). `silos`: a local deployment of that many silos, each
    the slice of `config`'s train split of its index; None: the SuperLink at `[silos] address`
    and its SuperNodes. `config` is written, resolved, to the folder of the run's Flower files,
    and the coordinator and the local silos read that file.

    Raises:
      PateError: the plan refused (before any process starts); the coordinator's refusal or
        failure, in its one line (nothing charged then).
    """
    config = silo_party.absolute_paths(silo_party.with_silos(config, silos))  # read in other working directories
    public_plan(config)  # refused before any process starts
    silo_party.deploy(config, workdir, components=(_SERVER, _CLIENT), what="the release across silos", silos=silos,
                      overwrite=overwrite, echo=echo)
