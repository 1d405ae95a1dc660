"""Choosing `[fedavg]`'s public settings without the private data: `pate fedavg`'s own
round (the vmapped clipped step, the calibrated noise, the server update) run on a *public
proxy* — the labelled public pool cut into clients — and scored on the evaluation split, for a
grid of (algorithm, pca, rounds, learning rate or rho) at each total eps. The private train
split is never read, so settings chosen here (configs/fashion_mnist.toml's and
configs/fashion_mnist_silos.toml's [fedavg]) are not a function of private values.

Two proxies:
- ``--proxy-clients 0`` (default): clients of the private clients' own size (500 clients of 120
  in configs/fashion_mnist.toml: the pool holds 75 of them), at the same eps.
- ``--proxy-clients P'`` (cross-silo: the pool cannot hold 10 clients of 6000): the pool cut into
  P' clients of 9000 / P' points; with ``--proxy-eps matched`` (default) at eps × (I √P) / (I' √P'),
  so that the noise of the averaged model over the signal of one client's mean gradient,
  ∝ 1 / (I ε √P), matches the private run's (I points in each of P clients).

``--model scatternet``: the [dpsgd] ScatterNet features of the pool and the evaluation split
(public images only), projected as `pate fedavg` does.

    python bench/fedavg_proxy.py [--config configs/fashion_mnist.toml] [--eps 1 3]
        [--algorithms fedavg iadmm] [--mechanisms laplace gaussian] [--model linear|scatternet] [--pca 0 4 8 16]
        [--schedules 10:10 20:30 40:30] [--proxy-clients P'] [--proxy-eps matched|same]
        [--draws 4] [--seed 0]

Schedules are ``rounds:learning_rate`` for FedAvg and ``rounds:rho`` for IADMM. One JSON
object per setting (mean accuracy over the draws), then the best per (algorithm, mechanism, eps).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


_PROJECTED: dict = {}


def projected(pool_x, eval_x, pca: int, whiten: bool = False):
    """(pool, eval) projected onto the pool's top ``pca`` directions, computed once per ``pca``
    (the SVD of the pool's features is most of a run's time)."""
    from pate.programs.projection import project, public_projection

    if not pca:
        return pool_x, eval_x
    if (pca, whiten) not in _PROJECTED:
        proj = public_projection(pool_x, pca, whiten)
        _PROJECTED[pca, whiten] = (project(proj, pool_x), project(proj, eval_x))
    return _PROJECTED[pca, whiten]


def proxy_accuracy(cfg, pool_x, pool_y, eval_x, eval_y, num_classes, *, client_size, delta, source) -> float:
    """One `pate fedavg` training of ``cfg`` on the public proxy (inputs already features):
    the product's own rounds (`pate.baselines.fedavg.train_rounds`); the accuracy on the
    evaluation split (NaN when the rounds diverged)."""
    from analysis.core.errors import PateError
    from pate.baselines import fedavg as fa

    x, ex = projected(pool_x, eval_x, cfg.pca, cfg.whiten)
    clients = x.shape[0] // client_size
    shards = np.arange(clients * client_size).reshape(clients, client_size)
    plan = fa.PLANS[cfg.mechanism](cfg, client_size, None, delta, (x.shape[1] + 1) * num_classes, clients)
    try:
        theta, _ = fa.train_rounds(cfg, plan, shards, x, pool_y, num_classes, source, False, lambda *_: None)
    except PateError:
        return float("nan")
    logits = np.concatenate([ex, np.ones((ex.shape[0], 1), np.float32)], axis=1) @ theta
    return float(np.mean(logits.argmax(axis=1) == eval_y))


def public_inputs(config, splits, model: str):
    """(pool_x, eval_x) as `pate fedavg` feeds its model: pixels clamped to [0, 1], or the
    ScatterNet features of `[dpsgd]` (public images only), flattened."""
    if model == "scatternet":
        from pate.programs import scattering

        d = config.dpsgd
        pool = scattering.features(splits.pool_x, d.scattering_j, d.scattering_l, d.groups)
        ev = scattering.features(splits.eval_x, d.scattering_j, d.scattering_l, d.groups)
    else:
        pool, ev = np.clip(splits.pool_x, 0, 1), np.clip(splits.eval_x, 0, 1)
    return pool.reshape(pool.shape[0], -1), ev.reshape(ev.shape[0], -1)


def proxy_scale(private_clients: int, client_size: int, proxy_clients: int, proxy_size: int,
                distributed: bool = False) -> float:
    """The eps factor that matches the proxy's noise-to-signal to the private run's:
    (I √P) / (I' √P') for noise on every client's message; (I P) / (I' P') for distributed noise
    (``skellam``: one central release's noise on the sum of all N = I P points' gradients)."""
    if distributed:
        return (client_size * private_clients) / (proxy_size * proxy_clients)
    return (client_size * math.sqrt(private_clients)) / (proxy_size * math.sqrt(proxy_clients))


def main(argv=None) -> int:
    from analysis.core.noise import NoiseSource
    from pate.config import load_config
    from pate.data import load_dataset, split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--algorithms", nargs="+", choices=["fedavg", "iadmm"], default=None,
                    help="default: the config's fedavg.algorithm")
    ap.add_argument("--model", choices=["linear", "scatternet"], default=None, help="default: the config's")
    ap.add_argument("--mechanisms", nargs="+", choices=["laplace", "gaussian", "skellam"], default=None,
                    help="default: the config's fedavg.mechanism")
    ap.add_argument("--pca", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--whiten", action="store_true", help="whiten the public projection (fedavg.whiten)")
    ap.add_argument("--schedules", nargs="+", default=["10:10", "20:30", "40:30"],
                    help="rounds:learning_rate (FedAvg) or rounds:rho (IADMM)")
    ap.add_argument("--proxy-clients", type=int, default=0, help="0: clients of the private clients' size")
    ap.add_argument("--proxy-eps", choices=["matched", "same"], default="matched")
    ap.add_argument("--server-momentum", type=float, nargs="+", default=None,
                    help="FedAvg server momentum values to try (default: the config's)")
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    config = load_config(args.config)
    cfg = config.fedavg
    model = args.model or cfg.model
    splits = split(load_dataset(config.data), config.data.public_size)
    pool_x, eval_x = public_inputs(config, splits, model)
    private_clients = cfg.clients or config.teachers.num_teachers
    client_size = splits.train_x.shape[0] // private_clients
    proxy_size, factors = client_size, {}
    if args.proxy_clients:
        proxy_size = pool_x.shape[0] // args.proxy_clients
        if args.proxy_eps == "matched":
            factors = {m: proxy_scale(private_clients, client_size, args.proxy_clients, proxy_size, m == "skellam")
                       for m in ("laplace", "gaussian", "skellam")}
    source = NoiseSource(args.seed, stream=2)
    best: dict[str, dict] = {}
    settings = [(a, m) for a in args.algorithms or [cfg.algorithm] for m in args.mechanisms or [cfg.mechanism]]
    for algorithm, mechanism in settings:
        factor = factors.get(mechanism, 1.0)
        for eps in args.eps:
            for pca in args.pca:
                momenta = (args.server_momentum or [cfg.server_momentum]) if algorithm == "fedavg" else [0.0]
                for schedule, momentum in itertools.product(args.schedules, momenta):
                    rounds, value = int(schedule.split(":")[0]), float(schedule.split(":")[1])
                    step = {"learning_rate": value} if algorithm == "fedavg" else {"rho": value}
                    step["server_momentum"] = momentum
                    run_cfg = dataclasses.replace(cfg, algorithm=algorithm, mechanism=mechanism, model=model, pca=pca,
                                                  whiten=args.whiten and pca > 0,
                                                  rounds=rounds, eps=eps * factor, **step)
                    start = time.time()
                    accs = [proxy_accuracy(run_cfg, pool_x, splits.pool_y, eval_x, splits.eval_y,
                                           splits.num_classes, client_size=proxy_size,
                                           delta=config.privacy.delta, source=source)
                            for _ in range(args.draws)]
                    row = {"algorithm": algorithm, "mechanism": mechanism, "eps": eps, "proxy_eps": eps * factor, "model": model,
                           "pca": pca, "whiten": run_cfg.whiten, "rounds": rounds, **step, "client_size": proxy_size,
                           "clients": pool_x.shape[0] // proxy_size, "accuracy_mean": float(np.mean(accs)),
                           "accuracy": accs, "wall_time_s": time.time() - start}
                    print(json.dumps(row), flush=True)
                    key = f"{algorithm} {mechanism} eps {eps:g}"
                    if row["accuracy_mean"] > best.get(key, {}).get("accuracy_mean", -1):
                        best[key] = row
    print(json.dumps({"summary": "best per algorithm, mechanism and eps", "best": best}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
