"""One rollout: generate completions for a step's prompts with the backend, score them with
the rewards, and keep the groups the algorithm selects (dynamic sampling, guidance)."""
