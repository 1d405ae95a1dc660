"""The privacy of the baselines that learn from the same data: DP-SGD's accountant,
FedAvg's and IADMM's messages, DP-MERF's embedding."""
