"""A feature map fitted on the **public** pool alone, for fine-grained PATE's neighbour search
(`pate.release.fine_grained_release`): each image's scattering coefficients (`pate.programs.scattering`:
fixed filters, each example group-normalised with its own statistics), projected on the top
principal directions of the public pool's coefficients, as quantised unit rows
(`analysis.mechanisms.fine_grained.quantise_rows`).

Nothing private enters the fit, and each image's row is computed from that image and the fitted
public map alone (row by row or by BLAS, whose order of operations depends on shapes, never on
values): what the release's sensitivity needs of a record's neighbours.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.mechanisms import fine_grained
from analysis.core.errors import PateError
from pate.programs import scattering
from pate.programs.projection import top_directions


@dataclasses.dataclass(frozen=True)
class PublicMap:
    """The fitted map: the scattering settings and the pool's mean and principal directions."""

    scattering_j: int
    scattering_l: int
    groups: int
    mean: np.ndarray  # (F,) float64
    directions: np.ndarray  # (F, dims) float64, columns by decreasing variance

    def coefficients(self, images: np.ndarray) -> np.ndarray:
        """(n, F) scattering features of images (n, H, W, C) in [0, 1]."""
        feats = scattering.group_normalize(scattering.scatter(images, self.scattering_j, self.scattering_l),
                                           self.groups)
        return feats.reshape(feats.shape[0], -1)

    def rows(self, images: np.ndarray | None, coefficients: np.ndarray | None = None) -> np.ndarray:
        """(n, dims) int64 quantised unit rows of images (or of their `coefficients`)."""
        x = self.coefficients(images) if coefficients is None else coefficients
        return fine_grained.quantise_rows((np.asarray(x, np.float64) - self.mean) @ self.directions)


def fit(pool_images: np.ndarray, dims: int, *, scattering_j: int = 2, scattering_l: int = 8,
        groups: int = 27) -> tuple[PublicMap, np.ndarray]:
    """The map fitted on the public pool's images, and the pool's quantised rows."""
    base = PublicMap(scattering_j, scattering_l, groups, np.zeros(0), np.zeros((0, 0)))
    coefficients = base.coefficients(pool_images)
    fitted = fit_coefficients(coefficients, dims, scattering_j=scattering_j, scattering_l=scattering_l,
                              groups=groups)
    return fitted, fitted.rows(None, coefficients)


def fit_coefficients(coefficients: np.ndarray, dims: int, *, scattering_j: int = 2, scattering_l: int = 8,
                     groups: int = 27) -> PublicMap:
    """The map fitted on the public pool's scattering `coefficients` ((n, F), `PublicMap.coefficients`).

    The principal directions are the top ``dims`` eigenvectors of the pool's scatter matrix
    (`pate.programs.projection.top_directions`).

    Raises:
      PateError: ``dims`` above what the pool gives (its size or its feature count).
    """
    n, f = coefficients.shape
    if not 1 <= dims <= min(n, f):
        raise PateError(f"fine_grained.pca = {dims} but the public pool gives at most {min(n, f)} principal "
                        "directions; lower fine_grained.pca")
    x = np.asarray(coefficients, np.float64)
    mean = x.mean(axis=0)
    return PublicMap(scattering_j, scattering_l, groups, mean, top_directions(x - mean, dims))
