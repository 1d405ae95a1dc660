"""What every room of the analysis stands on: the error type, checks of user values, files
(plain reads, atomic writes), the exact noise samplers, and vote histograms."""
