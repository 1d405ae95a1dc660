"""The run directory and everything written to disk: the lock, the door every writer
goes through, digests, checkpoints, and the ledger of every release of a data set."""
