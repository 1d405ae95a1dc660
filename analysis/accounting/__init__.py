"""Accountants: Rényi DP and its conversions to (ε, δ), dp-accounting's privacy loss
distributions, and the calibration of noise to a budget."""
