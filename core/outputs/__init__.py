"""What a run leaves behind: atomic checkpoints and resuming from them, metrics and samples,
the end-of-run summary and the plots."""
