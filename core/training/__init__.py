"""The training loop and its parts: the models a run holds, the update (log-probs, advantages,
loss, optimizer step), the pre-flight checks and the memory housekeeping of a CPU run."""
