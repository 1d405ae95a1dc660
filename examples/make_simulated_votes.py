"""Writes examples/votes_simulated_250.npz: a *simulated* 250-teacher vote histogram
(1000 queries, 10 classes) for trying `pate analyze` without training anything.

Each query's class shares come from a Dirichlet draw, mostly peaked (teachers agree)
and sometimes flat (teachers split), like a real ensemble. It holds no real data."""

import os

import numpy as np


def main() -> None:
    rng = np.random.default_rng(2017)
    conc = rng.choice([0.03, 0.3, 1.0], size=1000, p=[0.8, 0.15, 0.05])
    votes = np.stack([rng.multinomial(250, rng.dirichlet(np.full(10, c))) for c in conc]).astype(np.int32)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "votes_simulated_250.npz")
    np.savez_compressed(out, votes=votes)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
