"""DP-FedSGD with distributed noise (any `analysis.mechanisms.quantised_sum.QuantisedSum` record:
``ddg``, ``skellam``) over Flower's SecAgg+: the rounds of
`pate.baselines.secure_fedavg` with every silo a Flower ClientApp that reads only its own records
and sends (Q_p + Z_p) mod M through Flower's SecAgg+ workflow and mod (`pate.programs.secure_sum`:
the ranges under which SecAgg+ carries integers exactly), the coordinator a ServerApp's round that
sees the sum alone.

Round t: the coordinator sends the public model (float32 bytes in the fit config) with the request
for each silo's input; each silo computes its records' quantised clipped gradients summed
(`secure_fedavg.quantised_sums`, the same program as in process), draws its share
(`record.share`: exact N_ℤ(0, σ²), or Poisson(μ/n) − Poisson(μ/n)) from its own noise source and returns the residues mod M; SecAgg+ unmasks the sum
mod M, which `record.decode_sum` refuses unless every silo's share is in it and decodes; the
coordinator steps w ← w − η · total/(s N). The same arithmetic as `pate fedavg`'s in-process sum,
so the privacy statement is the record's (`analysis.mechanisms.ddg`, `analysis.mechanisms.skellam`); what Flower adds is that the silos
are separate parties (SecAgg+'s confidentiality is Flower's, as `secure_sum` states). The modulus
must fit SecAgg+'s ranges (2 n M below 2^32: `SecAggRanges.for_modulus` refuses otherwise).

A library of rounds, tested through `pate.programs.flower_loopback` (2 rounds, 3 silos);
`pate silos fedavg` (`pate.baselines.fedavg_silos`) runs it over a SuperLink and SuperNodes.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np

from analysis.mechanisms.quantised_sum import QuantisedSum
from pate.baselines.secure_fedavg import quantised_sums
from pate.programs import secure_sum


def silo_message(record: QuantisedSum, x, y, config: dict, source) -> np.ndarray:
    """A silo's input for the round whose fit config is `config` (the public model): its records'
    (x, y) quantised clipped gradients at that model, summed, plus its share, mod M (int64, flat)."""
    theta = np.frombuffer(config["theta"], np.float32).reshape(int(config["rows"]), int(config["cols"]))
    sums = np.asarray(quantised_sums(record)(jnp.asarray(theta), jnp.asarray(x)[None], jnp.asarray(y)[None]))[0]
    q = sums.astype(np.int64).ravel()
    return record.encode(q, record.share(source, q.shape))


def silo_app(record: QuantisedSum, records_of: Callable[[int], tuple], source_of: Callable[[int], object]):
    """A silo's Flower ClientApp: ``records_of(i)`` -> (x, y), silo i's own records only;
    ``source_of(i)``: its noise source (`analysis.core.noise.NoiseSource`). Its input is
    `silo_message`."""
    ranges = secure_sum.SecAggRanges.for_modulus(record.modulus, record.clients)

    def contribute(context, config):
        silo = int(context.node_config["silo"])
        x, y = records_of(silo)
        return silo_message(record, x, y, config, source_of(silo)), ranges, silo

    return secure_sum.client_app(contribute)


def flower_round(record: QuantisedSum, learning_rate: float, grid, context, *, nodes: list[int],
                 timeout: float, fit_config: dict | None = None, setup_config: dict | None = None) -> Callable:
    """The coordinator's round, with the in-process round's signature (`secure_fedavg.secure_round`;
    the private arrays and the noise source are the silos', unused here): one SecAgg+ round over
    ``nodes``, the decoded total, the step. A silo that drops stops the round (SecAgg+'s threshold is
    every silo) and a sum short of a share is refused: one line, the model not moved. `fit_config`
    and `setup_config` add the coordinator's word to each input request and SecAgg+ setup message
    (`secure_sum.secure_sum`: the plan the silos check)."""
    ranges = secure_sum.SecAggRanges.for_modulus(record.modulus, record.clients)

    def one_round(theta, lam, xs=None, ys=None, source=None):
        public = np.asarray(theta, np.float32)
        got = secure_sum.secure_sum(grid, context, nodes=list(nodes), ranges=ranges, needed=record.clients,
                                    timeout=timeout, setup_config=setup_config,
                                    fit_config={**(fit_config or {}), "theta": public.tobytes(),
                                                "rows": public.shape[0], "cols": public.shape[1]})
        total = record.decode_sum(got.residues, got.present)
        return theta - learning_rate * record.mean_gradient(total).reshape(theta.shape), lam

    return one_round
