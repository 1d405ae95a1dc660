"""Samples per second of the exact discrete Laplace samplers of `analysis.core.noise`: the
vectorised one (`discrete_laplace_array`, what `pate fedavg` noises its grid messages
with) against the scalar one (`discrete_laplace`, Fraction arithmetic), and the float64
Laplace (`NoiseSource.laplace`, the inexact sampler fedavg used before) for scale, at a
few integer scales t. One JSON object per (sampler, scale) on stdout.

    python bench/discrete_noise.py [--scales 1 50 53000 4000000] [--vector 1000000]
        [--scalar 3000] [--seed S]

Without --seed the bits come from the OS (what a real release uses); a seed makes the
figures reproducible and measures Philox instead of os.urandom.
"""

from __future__ import annotations

import argparse
import json
import time

from analysis.core.noise import NoiseSource, discrete_laplace, discrete_laplace_array


def rate(draw, count: int) -> float:
    start = time.perf_counter()
    draw(count)
    return count / (time.perf_counter() - start)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 50, 53000, 4000000])
    parser.add_argument("--vector", type=int, default=1_000_000, help="samples per vectorised call")
    parser.add_argument("--scalar", type=int, default=3000, help="samples of the scalar sampler")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    source = NoiseSource(args.seed)
    rows = []
    for t in args.scales:
        samplers = {
            "discrete_laplace_array": lambda n, t=t: discrete_laplace_array(source, t, n),
            "discrete_laplace (scalar)": lambda n, t=t: [discrete_laplace(source, t) for _ in range(n)],
            "float64 laplace (inexact)": lambda n, t=t: source.laplace(n, t),
        }
        counts = {"discrete_laplace (scalar)": args.scalar}
        for name, draw in samplers.items():
            count = counts.get(name, args.vector)
            row = {"sampler": name, "scale": t, "samples": count, "samples_per_s": round(rate(draw, count)),
                   "entropy": "os.urandom" if args.seed is None else "philox seed"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
