"""The JAX programs and the public feature maps: models, augmentation, keys, placement on
devices, voting, round-2 heads, teacher and student training, scattering and projections."""
