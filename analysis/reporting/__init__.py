"""The ε report, its table and files, the data-independent ε under every accountant, and
`pate audit`'s empirical ε."""
