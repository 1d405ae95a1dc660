"""The command line's options and their checks (the click entry is the root `cli.py`)."""
