"""Task models: GLUE data, fine-tuning, head ablation and importance (Kovaleva et al., Michel et al.)."""
