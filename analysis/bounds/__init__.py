"""The PATE bounds: LNMax (PATE 2017) and GNMax, Confident-GNMax and Interactive-GNMax
(PATE 2018), data-independent and data-dependent."""
