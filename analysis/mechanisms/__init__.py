"""The mechanisms as records (one per release kind, with what it can do and what it costs),
their registry, what a release costs and how releases compose, and the analysis of the
mechanisms that are not the PATE papers' (fine-grained PATE, ...)."""
