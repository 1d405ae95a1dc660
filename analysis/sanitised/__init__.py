"""Smooth sensitivity and the sanitised releases of a data-dependent ε: LNMax's
(PATE 2017, Section 3) and GNSS (PATE 2018, Section 4.3)."""
