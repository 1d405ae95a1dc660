"""What is released and its accounting: the aggregators, the target-eps plan, round-2 query
selection, labels.npz as one value, the privacy report and the run summary."""
