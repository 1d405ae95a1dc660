"""`pate silos run`: a fine-grained release across silos on Flower (docs/silos.md), one central
release charged once.

Three parts, each a function here:

- `contribute`, the body of every silo's ClientApp (`client_app`, on a SuperNode): reads its own
  config (the SuperNode's node config ``pate_config``) and only its own records (its config's
  train split, or with ``slice`` its ``silo``-th slice of it), checks the coordinator's plan
  against its own, and returns (H_i + Z_i) mod M (`pate.release.silo_release.silo_input`),
  which Flower's SecAgg+ mod masks before it leaves;
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
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.config import Config
from pate.programs import secure_sum
from pate.store.identity import SILOS_META


def ledger_name(config: Config) -> str:
    """The ledger the coordinator charges: `[silos] ledger`, else ``silos:`` and the data set's
    name (the coordinator holds no record: it cannot know the data set by its records)."""
    from pate.data import dataset_name

    return config.silos.ledger or f"silos:{dataset_name(config.data)}"


def _ledger(config: Config):
    from pate.store import ledger as ledger_mod
    from pate.store.identity import directory_for

    return ledger_mod.Ledger(ledger_name(config), directory_for(config.privacy))


def public_plan(config: Config):
    """The public pool (`pate.data.load_public`: no private record) and the plan on it."""
    from pate.data import load_public
    from pate.programs.public_features import MapSettings, check_ready
    from pate.release.silo_release import plan_of

    check_ready(config.features.map, MapSettings.of(config))  # before any data is read
    pool = load_public(config.data)
    return pool, plan_of(config, pool)


# --------------------------------------------------------------------------- a silo


def _node_value(node: dict, key: str, kind: type):
    """The SuperNode's node-config value `key`, of type `kind` (str or int; a bool is no int)."""
    value = node.get(key)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    raise PateError(f"this SuperNode's --node-config lacks {key} (a {kind.__name__}): start it with "
                    "--node-config 'pate_config=\"/path/silo.toml\" silo=0' (docs/silos.md)")


def contribute(node: dict, fit_config: dict, echo=print):
    """A silo's part of the round (module docstring): ``(residues, ranges, silo index)``. `node`
    is the SuperNode's node config, `fit_config` the coordinator's word (the plan's digest)."""
    from analysis.core.noise import NoiseSource
    from pate.config import load_config
    from pate.data import split_rows, train_count
    from pate.programs.cluster import block
    from pate.programs.data_facts import with_data_defaults
    from pate.release.silo_release import check_plan, silo_input

    config = with_data_defaults(load_config(_node_value(node, "pate_config", str)))
    silo = _node_value(node, "silo", int)
    sliced = bool(node.get("slice", False))
    if not 0 <= silo < config.silos.silos:
        raise PateError(f"silo {silo} is not one of the {config.silos.silos} silos of its config ([silos] silos)")
    if not sliced and not config.silos.records:
        raise PateError(f"silo {silo}: set [silos] records, a public bound on all silos' records together (0 means "
                        "the [data] train split's count, which is this silo's alone)")
    _pool, plan = public_plan(config)
    check_plan(plan, fit_config.get("plan"), silo)
    total = train_count(config.data)
    rows = block(total, plan.silos, silo) if sliced else range(total)
    splits = split_rows(config.data, config.data.public_size, np.arange(rows.start, rows.stop))
    echo(f"silo {silo}: {len(rows)} records of its own, a share of 1/{plan.needed} of the noise")
    return silo_input(config, plan, splits, rows.start, NoiseSource(), echo), plan.ranges, silo


def _client(context, fit_config: dict):
    return contribute(dict(context.node_config), fit_config, echo=lambda _line: None)


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


class _Watched:
    """The Grid with every silo's error reply kept (Flower's reason: the ClientApp's exception),
    so that a round that stops names why."""

    def __init__(self, grid):
        self.grid, self.errors = grid, []

    def __getattr__(self, name):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        for reply in replies:
            if reply.has_error():
                self.errors.append(_reason(str(reply.error.reason)))
        return replies


def _reason(text: str) -> str:
    """A ClientApp's exception as Flower words it (``<class '...'>:<'message'>``): its message."""
    start, end = text.find(":<'"), text.rfind("'>")
    text = text[start + 3:end] if start >= 0 and end > start else text
    return " ".join(text.split())[:400]


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
        book = _ledger(config)
        check_run_ledger(book, door.run.path)
        book.check_budget([cost], p.total_budget, p.delta, "this release across silos")
        echo(plan.describe())
        side = fine_release.public_side(config, pool.pool_x, pool.num_classes, plan.noise, echo)
        watched = _Watched(grid)
        nodes = secure_sum.wait_for_silos(watched, plan.silos, s.timeout, "the SuperLink")
        try:
            total = secure_sum.secure_sum(watched, context, nodes=nodes, ranges=plan.ranges, needed=plan.needed,
                                          timeout=s.timeout, fit_config={"plan": plan.digest()})
        except PateError as err:
            raise PateError(_with_silo_errors(str(err), watched.errors)) from None
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


def _with_silo_errors(line: str, errors: list[str]) -> str:
    if not errors:
        return line
    return f"{line}; a silo said: {errors[0]}"


def _serve(grid, context) -> None:
    """The ServerApp's body: `coordinate` with the run config `run` submitted, its lines and
    outcome written to the outcome file (`run` prints them); a PateError is an outcome, not a
    crash of the ServerApp."""
    from pate.config import load_config
    from pate.programs.data_facts import with_data_defaults

    given = dict(context.run_config)
    lines: list[str] = []
    outcome = {"ok": False, "lines": lines}
    try:
        config = with_data_defaults(load_config(str(given["pate_config"])))
        coordinate(config, str(given["workdir"]), grid, context, overwrite=bool(given.get("overwrite", False)),
                   echo=lines.append)
        outcome["ok"] = True
    except PateError as err:
        outcome["error"] = str(err)
    except Exception as err:
        outcome["error"] = f"internal error in the coordinator: {type(err).__name__}: {err}"
        raise
    finally:
        if given.get("outcome"):
            _write_outcome(Path(str(given["outcome"])), outcome)


def _write_outcome(path: Path, outcome: dict) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(outcome), encoding="utf-8")
    os.replace(temp, path)


def _server_app():
    from flwr.serverapp import ServerApp

    server = ServerApp()
    server.main()(_serve)
    return server


#: The Flower components the submitted App names (`pate.programs.flower_deploy`): Flower's own
#: ServerApp (the coordinator, `coordinate`) and ClientApp (a silo, `contribute`, inside SecAgg+'s
#: mod). Importing this module imports Flower.
server_app = _server_app()
client_app = secure_sum.client_app(_client)


# --------------------------------------------------------------------------- pate silos run


def _absolute_paths(config: Config) -> Config:
    """`config` with its relative file paths (`[data] path`, `[features] weights` and `filters`) made
    absolute from this working directory, as this process reads them."""
    def absolute(path: str) -> str:
        return str(Path(path).expanduser().resolve()) if path else path

    return dataclasses.replace(
        config, data=dataclasses.replace(config.data, path=absolute(config.data.path)),
        features=dataclasses.replace(config.features, weights=absolute(config.features.weights),
                                     filters=absolute(config.features.filters)))


def run(config: Config, workdir, *, silos: int | None = None, overwrite: bool = False, echo=print) -> None:
    """`pate silos run` (module docstring). `silos`: a local deployment of that many silos, each
    the slice of `config`'s train split of its index; None: the SuperLink at `[silos] address`
    and its SuperNodes. `config` is written, resolved, to the folder of the run's Flower files,
    and the coordinator and the local silos read that file.

    Raises:
      PateError: the plan refused (before any process starts); the coordinator's refusal or
        failure, in its one line (nothing charged then).
    """
    from pate.config import config_to_toml
    from pate.programs import flower_deploy

    if silos is not None:
        config = dataclasses.replace(config, silos=dataclasses.replace(config.silos, silos=int(silos)))
        config.silos.validate()
    config = _absolute_paths(config)  # the ServerApp and SuperNodes run in other working directories
    public_plan(config)  # refused before any process starts
    workdir = Path(workdir).expanduser().resolve()
    folder = Path(tempfile.mkdtemp(prefix="pate-silos-"))
    keep = True
    try:
        config_path = folder / "config.toml"
        config_path.write_text(config_to_toml(config), encoding="utf-8")
        app = flower_deploy.write_app(folder / "app")
        outcome_path = folder / "outcome.json"
        run_config = {"pate_config": str(config_path), "workdir": str(workdir), "outcome": str(outcome_path),
                      "overwrite": bool(overwrite)}
        limit = 6 * config.silos.timeout + 600
        home = folder / "flwr-home"
        if silos is not None:
            echo(f"silos: a SuperLink and {silos} SuperNodes on 127.0.0.1, each silo a slice of the [data] train split "
                 f"(Flower's logs: {folder})")
            with flower_deploy.LocalDeployment(folder, config_path, int(silos)) as local:
                flower_deploy.write_connection(local.home, local.address)
                flower_deploy.submit(app, local.home, run_config, folder / "flwr-run.log", limit)
        else:
            echo(f"silos: submitting the release to the SuperLink at {config.silos.address}")
            flower_deploy.write_connection(home, config.silos.address, config.silos.root_certificates)
            flower_deploy.submit(app, home, run_config, folder / "flwr-run.log", limit)
        if not outcome_path.is_file():
            raise PateError(f"the coordinator (the ServerApp) ended without an outcome: nothing was released "
                            f"(Flower's logs: {folder})")
        outcome = json.loads(outcome_path.read_text(encoding="utf-8"))
        for line in outcome.get("lines", []):
            echo(line)
        if not outcome.get("ok"):
            raise PateError(str(outcome.get("error") or "the coordinator failed"))
        keep = False
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
