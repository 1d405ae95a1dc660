"""`pate silos fedavg`: DP-FedSGD with distributed noise across silos on Flower (docs/silos.md),
the federated counterpart of `pate silos run`: each silo a SuperNode that reads only its own
records, the coordinator a ServerApp that sees each round's secure sum alone, one central charge.

Three parts, each a function here:

- `ready` and `contribute`, the body of every silo's ClientApp (`client_app`): the silo's own
  config and records (`pate.programs.silo_party.own_records`); at each round's SecAgg+ setup
  message (`ready`, before any silo sends that round's input) the coordinator's plan checked
  against the silo's own (`check_plan`: the digest of the distributed-noise record, the
  `[fedavg]` settings, the silos, the record bound and the public pool) and its records' ledger
  checked for the rounds still to come; asked for its input (`contribute`), the plan checked
  again, its message computed by `pate.baselines.flower_fedsgd.silo_message` (its records'
  quantised clipped gradients at the public model, summed, plus its share, mod M), one round
  charged to its records' ledger (`pate.release.silo_ledger.charge_cost`), and the message
  handed to Flower's SecAgg+ mod, which masks it;
- `coordinate`, the body of the coordinator's ServerApp (`server_app`): the public pool and
  evaluation split only, the run directory's door (step ``fedavg-silos``: fedavg.json and
  fedavg/), the coordinator's ledger's budget (`silo_party.coordinator_ledger`), then
  `[fedavg] rounds` rounds of `flower_fedsgd.flower_round` (one SecAgg+ round each, the decoded
  total, the step; server momentum as `pate fedavg`'s), and only once every round has ended:
  the model, fedavg.json (`pate.baselines.fedavg`'s record) and ONE ledger charge of the central
  composition. A round that stops (a silo killed, silent past `[silos] timeout`, refusing, or a
  share missing) stops the run in one line: nothing written or charged by the coordinator;
- `run`, the command: the plan checked before any process starts, then the same deployment as
  `pate silos run` (`silo_party.deploy`).

**What a silo's ledger is charged** (the record's `alone_cost`, per round sent). Everything the
other parties see that depends on silo i's records in round t is its message y_i = (Q_i + Z_i)
mod M, Z_i its own share; the model w_t it is computed at is public. Whatever the coordinator
and the other silos do (break SecAgg+'s 32-bit-seeded masks, collude and subtract their own
shares), a round tells them no more of silo i's records than y_i alone, which is the central
mechanism's theorem at the share's noise alone (Skellam: μ/n, `skellam.coalition_eps` with
n − 1 colluding; ddg: one share N_ℤ(0, σ²), `ddg.coalition_eps` with n − 1 colluding), under replace-one of one of its records (the sensitivity is the central one);
the rounds compose adaptively, so each round sent is charged that one round's cost, and the
ledger composes them. The budget is checked at every round's setup for the rounds left (so
before the first input for all `[fedavg] rounds`), and again under the ledger's lock at the
charge. Granted a secure sum and n − 1 honest silos the silo's records cost the central ε; the
silo's ledger does not grant it. A round that fails after a silo sent its message keeps that
silo's charge (a silo cannot tell a failed round from a coordinator that kept its input).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time

import numpy as np

from analysis.core.errors import PateError
from pate.baselines import fedavg
from pate.config import Config, config_to_dict
from pate.programs import secure_sum, silo_party

#: The door's step (`pate.store.stages`): fedavg.json and fedavg/, as `pate fedavg` writes them.
STEP = "fedavg-silos"


@dataclasses.dataclass(frozen=True)
class FedPlan:
    """The public plan every party of the training across silos computes alike: the central
    plan of `pate fedavg` for `silos` clients (`plan.grid`, the distributed-noise record whose
    shares sum to one central release per round) over `records` records at most."""

    plan: fedavg.Plan
    silos: int
    records: int
    client_size: int
    length: int
    num_classes: int
    ranges: secure_sum.SecAggRanges
    pool_sha256: str
    settings: dict

    @property
    def record(self):
        """The distributed-noise record (encode, shares, decode_sum, mean_gradient, cost, alone_cost)."""
        return self.plan.grid

    @property
    def rounds(self) -> int:
        return int(self.record.rounds)

    def digest(self) -> str:
        """sha256 of every public value the plan fixes: what the silos and the coordinator agree on."""
        doc = {"record": self.record.to_json(self.length), "cost": self.plan.cost.to_json(), "silos": self.silos,
               "records": self.records, "length": self.length, "num_classes": self.num_classes,
               "ranges": dataclasses.asdict(self.ranges), "pool_sha256": self.pool_sha256, "settings": self.settings}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def describe(self) -> str:
        return (f"silos: {self.silos}, {self.rounds} rounds of DP-FedSGD ({self.records} records at most); "
                f"{self.record.describe()}; secure sum: Flower's SecAgg+ (modulus range {self.ranges.modulus_range})")


def _public_splits(config: Config):
    """The public side of the data set: the pool and the evaluation split (the test split, read
    whole, no train record: `train_x` has 0 rows), and the train split's record count."""
    from pate.data import Splits, load_public
    from pate.data.formats import format_of

    pool = load_public(config.data)  # checks the pool against the test split; classes from public labels
    test = format_of(config.data.name).public(config.data)
    k = config.data.public_size
    x = np.asarray(test.pool_x)
    return Splits(np.zeros((0, *x.shape[1:]), x.dtype), np.zeros(0, np.int64), x[:k], np.asarray(test.pool_y)[:k],
                  x[k:], np.asarray(test.pool_y)[k:], int(pool.num_classes)), int(pool.train_size)


def public_plan(config: Config):
    """``(public splits, their features, plan)`` from public values only. Refused in one line: a
    model other than the linear one, a mechanism that noises every client's message (no shares
    to sum), a modulus SecAgg+ cannot carry exactly."""
    cfg, s = config.fedavg, config.silos
    if cfg.model != "linear":
        raise PateError(f'pate silos fedavg trains the linear model (fedavg.model = "linear"), not {cfg.model!r}: '
                        "a silo computes its features alone, and the scattering features are not built across silos")
    public, train_size = _public_splits(config)
    features = fedavg._features(config, public, None)  # the pool's projection: the same at every party
    _, test_x, _, lipschitz, _ = features
    records = int(s.records or train_size)
    if records < s.silos:
        raise PateError(f"[silos] records ({records}) must bound all silos' records together, at least one a silo")
    size = -(-records // s.silos)  # the plan's N = silos x size >= records: the step's public divisor
    length = (int(test_x.shape[1]) + 1) * public.num_classes
    plan = fedavg.PLANS[cfg.mechanism](cfg, size, lipschitz, config.privacy.delta, length, s.silos)
    if plan.rounds_by is None:
        raise PateError(f'fedavg.mechanism = "{cfg.mechanism}" noises every client\'s message: across silos set a '
                        'distributed mechanism (fedavg.mechanism = "ddg" or "skellam"), whose shares sum to one central release')
    ranges = secure_sum.SecAggRanges.for_modulus(plan.grid.modulus, s.silos)
    settings = {"fedavg": {k: v for k, v in config_to_dict(config)["fedavg"].items() if k != "eval_batch_size"},
                "public_size": config.data.public_size, "delta": config.privacy.delta}
    pool_sha = hashlib.sha256(np.ascontiguousarray(public.pool_x).tobytes()).hexdigest()
    return public, features, FedPlan(plan, s.silos, records, size, length, public.num_classes, ranges, pool_sha,
                                     settings)


def check_plan(plan: FedPlan, asked: object, silo: int) -> None:
    """A silo refuses a coordinator whose plan (its digest, `asked`) is not its own."""
    if asked != plan.digest():
        raise PateError(f"silo {silo}: the coordinator's plan is not this silo's (the [fedavg] settings, [silos] silos "
                        "and records, [privacy] delta and the public pool must agree everywhere); this silo sends "
                        "nothing")


def _round(plan: FedPlan, said: dict, silo: int) -> int:
    """The round (1..R) the coordinator names; refused outside the plan's rounds."""
    t = said.get("round")
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= plan.rounds:
        raise PateError(f"silo {silo}: the coordinator asked for round {t!r}, outside the plan's 1..{plan.rounds}; "
                        "this silo sends nothing")
    return t


# --------------------------------------------------------------------------- a silo


def ready(node: dict, setup_config: dict) -> None:
    """A silo's word before a round's first input (module docstring): the plan, and its records'
    ledger for the rounds left (`silo_ledger.check_cost`)."""
    from pate.release import silo_ledger

    config, silo, _rows, own = silo_party.own_records(node)
    _public, _features, plan = public_plan(config)
    check_plan(plan, setup_config.get("plan"), silo)
    left = plan.rounds - _round(plan, setup_config, silo) + 1
    silo_ledger.check_cost(config, silo, plan.record.alone_cost(left),
                           f"its messages of the {left} rounds left of this training across silos", own)


def contribute(node: dict, fit_config: dict, echo=print):
    """A silo's input for one round (module docstring): ``(residues, ranges, silo index)``, the round
    charged to its own records' ledger right before the residues leave."""
    from analysis.core.noise import NoiseSource
    from pate.baselines import flower_fedsgd
    from pate.release import silo_ledger

    config, silo, rows, own = silo_party.own_records(node)
    _public, _features, plan = public_plan(config)
    check_plan(plan, fit_config.get("plan"), silo)
    t = _round(plan, fit_config, silo)
    splits = silo_party.own_splits(config, rows)
    train_x = fedavg._features(config, splits, None)[0]
    message = flower_fedsgd.silo_message(plan.record, train_x, splits.train_y, fit_config,
                                         NoiseSource(stream=fedavg.NOISE_STREAM))
    cost = plan.record.alone_cost(1)
    alone = _single_eps(cost, config.privacy.delta)
    describe = (f"round {t} of {plan.rounds}: a message sent into DP-FedSGD across {plan.silos} silos (this silo: "
                f"{silo}, its own share of the noise): eps {alone:.6g} at delta {config.privacy.delta:g} for these "
                "records whoever sees the message alone")
    silo_ledger.charge_cost(config, "fedavg", cost, splits,
                            {"name": "fedavg", "algorithm": "fedavg", "silos": plan.silos, "silo": int(silo),
                             "round": t, "rounds": plan.rounds, "plan": plan.digest(), "describe": describe},
                            "a silo's message in DP-FedSGD across silos (pate silos fedavg)", own)
    echo(f"silo {silo}: round {t}, {len(rows)} records, charged one message to the ledger of its records")
    return message, plan.ranges, silo


def _single_eps(cost, delta: float) -> float:
    from analysis.mechanisms import composition

    return composition.single_eps(cost, delta)


def _client(context, fit_config: dict):
    return contribute(dict(context.node_config), fit_config, echo=lambda _line: None)


def _ready(context, setup_config: dict) -> None:
    ready(dict(context.node_config), setup_config)


# --------------------------------------------------------------------------- the coordinator


def coordinate(config: Config, workdir, grid, context, *, overwrite: bool = False, echo=print) -> fedavg.FedavgResult:
    """The coordinator's training (module docstring). `grid` reaches the silos; `context` is the
    ServerApp's.

    Raises:
      PateError: a bad plan, budget or run directory (before any silo is asked); a round that
        stops (nothing written or charged by the coordinator).
    """
    from pate.baselines.flower_fedsgd import flower_round
    from pate.baselines.release_step import training_loop
    from pate.programs.models import Linear
    from pate.programs.student_training import predict
    from pate.release.labels import check_run_ledger
    from pate.store import checkpoints, digests, rundir
    from pate.store import ledger as ledger_mod
    from pate.store.door import step

    start = time.time()
    public, (_, test_x, test_y, _, projection), plan = public_plan(config)
    cfg, p, s = config.fedavg, config.privacy, config.silos
    with step(STEP, workdir, config=config, overwrite=overwrite, data={}, keep_config=True, echo=echo) as door:
        book = silo_party.coordinator_ledger(config)
        check_run_ledger(book, door.run.path)
        book.check_budget([plan.plan.cost], p.total_budget, p.delta, "this federated model across silos")
        echo(plan.describe())
        watched = silo_party.Watched(grid)
        nodes = secure_sum.wait_for_silos(watched, plan.silos, s.timeout, "the SuperLink")
        digest = plan.digest()

        def fl_round(t, state):
            theta, velocity = state
            said = {"plan": digest, "round": t + 1}
            one = flower_round(plan.record, cfg.learning_rate, watched, context, nodes=nodes, timeout=s.timeout,
                               fit_config=said, setup_config=said)
            try:
                new, _ = one(theta, None)
            except PateError as err:
                raise PateError(f"round {t + 1} of {plan.rounds}: "
                                + silo_party.with_silo_errors(str(err), watched.errors)) from None
            if cfg.server_momentum:
                new, velocity = fedavg.server_momentum(theta, new, velocity, cfg.server_momentum)
            echo(f"round {t + 1} of {plan.rounds}: {plan.silos} shares summed")
            return new, velocity

        theta0 = np.zeros((test_x.shape[1] + 1, plan.num_classes))
        (theta, _), seconds = training_loop(
            "fedavg round", plan.rounds, fl_round, (theta0, np.zeros_like(theta0)), show_progress=False,
            diverged="federated training diverged (non-finite parameters); lower fedavg.learning_rate and run again "
                     "with --overwrite")
        params = fedavg.to_flax(theta)
        pred = predict(Linear(plan.num_classes), params, test_x, cfg.eval_batch_size)
        if projection is not None:
            params = {**params, "projection": projection}
        pool = public.pool_x.shape[0]
        delta = p.delta
        result = fedavg.FedavgResult(
            algorithm=cfg.algorithm, mechanism=cfg.mechanism, model=cfg.model,
            accuracy=float(np.mean(pred[pool:] == test_y[pool:])), accuracy_test=float(np.mean(pred == test_y)),
            eval_points=int(test_y.size - pool), eps=plan.plan.eps, delta=delta, per_round=plan.plan.per_round,
            per_round_eps=plan.plan.per_round_eps, rounds=cfg.rounds, clients=plan.silos,
            client_size=plan.client_size, sensitivity=plan.plan.sensitivity, noise_scale=plan.plan.scale,
            grid=plan.record, how=plan.plan.how + f" across {plan.silos} silos on Flower",
            wall_time_s=time.time() - start, data_set=book.summary(delta, extra=[plan.plan.cost]))
        checkpoints.save_params(door.out / rundir.FEDAVG_DIR, params, then="run `pate silos fedavg --overwrite` again")
        record = fedavg._record(config, plan.plan, result, theta, test_x, None, plan.num_classes, int(test_y.size))
        record.update(_silos_record(plan, book.public_name()))
        door.out.write_json(rundir.FEDAVG_JSON, record, config)
        door.charge(book, "fedavg", plan.plan.cost, run=door.run.path, budget=p.total_budget, delta=delta,
                    subject="fedavg:" + digests.file_digest(door.out / rundir.FEDAVG_JSON),
                    mechanism={"name": "fedavg", "algorithm": cfg.algorithm, "silos": plan.silos,
                               "describe": f"{cfg.algorithm} {cfg.mechanism} across {plan.silos} silos (Flower "
                                           f"SecAgg+): {plan.plan.cost.describe()}"})
    echo(ledger_mod.cumulative_line(book, delta))
    echo(result.summary())
    echo(f"across {plan.silos} silos: {plan.silos} shares in each of {plan.rounds} rounds, summed by Flower's "
         f"SecAgg+ (the coordinator saw each round's sum alone); one charge to ledger {book.public_name()}; "
         f"rounds {seconds:.1f} s (printed only)")
    echo(f"wrote {door.run / rundir.FEDAVG_JSON} and {rundir.FEDAVG_DIR}/ (the federated model)")
    return result


def _silos_record(plan: FedPlan, ledger: str) -> dict:
    """fedavg.json's keys that say the run was across silos (beside `pate fedavg`'s record)."""
    record = plan.record
    n = plan.silos
    return {
        "partition": "silos (each SuperNode its own records)",
        "noise": (f"{record.describe()}; each share drawn at its own silo (OS entropy); the secure sum: Flower's "
                  "SecAgg+ in its exact integer ranges (pate/programs/secure_sum.py)"),
        "silos": {"silos": n, "shares": n, "present": n, "records_bound": plan.records, "ledger": ledger,
                  "secure_sum": "Flower SecAgg+", "modulus_range": plan.ranges.modulus_range, "plan": plan.digest(),
                  "silo_charge": "each silo charges its own records' ledger every round it sends, at its share's "
                                 "noise alone (record.alone_cost: the theorem at mu/n for Skellam, at one share for ddg)"},
    }


#: The Flower components the submitted App names: the coordinator's ServerApp (`coordinate`) and a
#: silo's ClientApp (`contribute`, inside SecAgg+'s mod; `ready` at each setup). Importing this
#: module imports Flower.
server_app = silo_party.server_app(coordinate)
client_app = secure_sum.client_app(_client, _ready)
_SERVER, _CLIENT = f"{__name__}:server_app", f"{__name__}:client_app"


# --------------------------------------------------------------------------- pate silos fedavg


def run(config: Config, workdir, *, silos: int | None = None, overwrite: bool = False, echo=print) -> None:
    """`pate silos fedavg` (module docstring): `silos` a local deployment of that many silos, each
    the slice of `config`'s train split of its index; None the SuperLink at `[silos] address`.

    Raises:
      PateError: the plan refused (before any process starts); the coordinator's refusal or
        failure, in its one line (nothing written or charged by it then).
    """
    config = silo_party.absolute_paths(silo_party.with_silos(config, silos))
    _public, _features, plan = public_plan(config)  # refused before any process starts
    silo_party.deploy(config, workdir, components=(_SERVER, _CLIENT), what="the federated training across silos",
                      silos=silos, overwrite=overwrite, rounds=plan.rounds, echo=echo)
