"""The baselines on the same split: DP-SGD (with its accounting), federated learning
(FedAvg/IADMM with output perturbation) and synthetic data (DP-MERF, PATE-GAN). They
import no step."""
