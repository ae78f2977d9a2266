"""What runs on a trained model or many runs: hyper-parameter sweeps (`sweep`), predictions and export (`predict`)."""
