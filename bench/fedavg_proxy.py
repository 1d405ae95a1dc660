"""Choosing `[fedavg]`'s public settings without the private data: `pate fedavg`'s own
round (the vmapped clipped step, the calibrated noise, the server update) run on a *public
proxy* — the labelled public pool cut into clients of the private clients' size — and
scored on the evaluation split, for a grid of (pca, rounds, learning_rate) at each total eps.
The private train split is never read, so settings chosen here (configs/fashion_mnist.toml's
[fedavg]) are not a function of private values.

    python bench/fedavg_proxy.py [--config configs/fashion_mnist.toml] [--eps 1 3]
        [--pca 4 8 16] [--schedules 10:10 20:30 40:30] [--draws 4] [--seed 0]

One JSON object per setting (mean accuracy over the draws), then the best per eps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def proxy_accuracy(cfg, pool_x, pool_y, eval_x, eval_y, num_classes, *, client_size, pca, rounds, lr, eps,
                   delta, source) -> float:
    """One `pate fedavg` training on the public proxy; the accuracy on the evaluation split."""
    import dataclasses

    import jax.numpy as jnp

    from pate.programs.projection import project, public_projection
    from pate.baselines import fedavg as fa

    cfg = dataclasses.replace(cfg, pca=pca, rounds=rounds, learning_rate=lr, eps=eps)
    proj = public_projection(pool_x, pca)
    x, ex = project(proj, pool_x), project(proj, eval_x)
    clients = x.shape[0] // client_size
    shards = np.arange(clients * client_size).reshape(clients, client_size)
    plan = fa.Plan.of(cfg, client_size, None, delta, (x.shape[1] + 1) * num_classes)
    messages = fa.make_round(cfg.algorithm, clip=cfg.clip_norm, learning_rate=lr, local_steps=cfg.local_steps,
                             rho=cfg.rho, norm=plan.norm)
    xs, ys = jnp.asarray(x[shards]), jnp.asarray(pool_y[shards])
    theta = np.zeros((x.shape[1] + 1, num_classes))
    lam = np.zeros((clients,) + theta.shape)
    for _ in range(rounds):
        sent = np.asarray(messages(jnp.asarray(theta, jnp.float32), jnp.asarray(lam, jnp.float32), xs, ys))
        noisy = fa.add_noise(sent, source, cfg.mechanism, plan.scale, plan.grid)
        theta, lam = fa.server_update(cfg.algorithm, noisy, lam, cfg.rho)
    logits = np.concatenate([ex, np.ones((ex.shape[0], 1), np.float32)], axis=1) @ theta
    return float(np.mean(logits.argmax(axis=1) == eval_y))


def main(argv=None) -> int:
    from analysis.noise import NoiseSource
    from pate.config import load_config
    from pate.data import load_dataset, split

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--pca", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--schedules", nargs="+", default=["10:10", "20:30", "40:30"], help="rounds:learning_rate")
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    config = load_config(args.config)
    splits = split(load_dataset(config.data), config.data.public_size)
    pool_x = np.clip(splits.pool_x, 0, 1).reshape(splits.pool_x.shape[0], -1)
    eval_x = np.clip(splits.eval_x, 0, 1).reshape(splits.eval_x.shape[0], -1)
    client_size = splits.train_x.shape[0] // (config.fedavg.clients or config.teachers.num_teachers)
    source = NoiseSource(args.seed, stream=2)
    best: dict[float, dict] = {}
    for eps in args.eps:
        for pca in args.pca:
            for schedule in args.schedules:
                rounds, lr = int(schedule.split(":")[0]), float(schedule.split(":")[1])
                start = time.time()
                accs = [proxy_accuracy(config.fedavg, pool_x, splits.pool_y, eval_x, splits.eval_y,
                                       splits.num_classes, client_size=client_size, pca=pca, rounds=rounds, lr=lr,
                                       eps=eps, delta=config.privacy.delta, source=source)
                        for _ in range(args.draws)]
                row = {"eps": eps, "pca": pca, "rounds": rounds, "learning_rate": lr, "client_size": client_size,
                       "clients": pool_x.shape[0] // client_size, "accuracy_mean": float(np.mean(accs)),
                       "accuracy": accs, "wall_time_s": time.time() - start}
                print(json.dumps(row), flush=True)
                if row["accuracy_mean"] > best.get(eps, {}).get("accuracy_mean", -1):
                    best[eps] = row
    print(json.dumps({"summary": "best per eps", "best": best}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
