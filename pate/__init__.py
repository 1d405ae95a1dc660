"""pate: Private Aggregation of Teacher Ensembles in JAX."""

from importlib import metadata as _metadata

from analysis.errors import PateError

try:
    __version__ = _metadata.version("pate-jax")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["PateError", "__version__"]
