"""The policy: loading it (device, dtype, GGUF), scoring completions with it (log-probs),
LoRA adapters, and exporting its weights to an inference engine."""
