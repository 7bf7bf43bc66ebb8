"""TRL 1.16's own reward functions (``trl.rewards``), made module-level callables that a
``callable`` reward can name, for tests/test_trl_own_rewards.py. Importing it needs ``trl``
(the test extra)."""

from trl.rewards import (
    accuracy_reward,
    get_cosine_scaled_reward,
    get_repetition_penalty_reward,
    get_soft_overlong_punishment,
    reasoning_accuracy_reward,
    think_format_reward,
)

cosine_scaled = get_cosine_scaled_reward(max_len=12)
repetition_penalty = get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)
soft_overlong = get_soft_overlong_punishment(max_completion_len=12, soft_punish_cache=6)

#: every function, by the name a config uses for it
FUNCTIONS = {
    "accuracy_reward": accuracy_reward,
    "reasoning_accuracy_reward": reasoning_accuracy_reward,
    "think_format_reward": think_format_reward,
    "cosine_scaled": cosine_scaled,
    "repetition_penalty": repetition_penalty,
    "soft_overlong": soft_overlong,
}
