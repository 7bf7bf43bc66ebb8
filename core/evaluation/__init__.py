"""Evaluation on held-out prompts (``rlvr eval`` and the in-training eval): sampled or greedy
completions, scored by the configured rewards, reported as mean rewards and pass@k."""
