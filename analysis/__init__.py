"""Privacy analysis for PATE: numpy/scipy only, no JAX, usable on votes from anywhere.

Modules: `lnmax` (PATE 2017, Laplace noisy max), `gnmax` (PATE 2018, Gaussian noisy
max and Confident-GNMax), `rdp` (Rényi DP conversions), `report` (the ε report),
`votes` (reading and validating vote histograms).
"""

from analysis.errors import PateError

__all__ = ["PateError"]
