"""What runs on a trained model or many runs: hyper-parameter sweeps (`sweep`), predictions
and export (`predict`, `new_pages`, `topk_export`; `ranking` is their fold-in and top K)."""
