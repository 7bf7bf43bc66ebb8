"""Cross-checks: what no single section can check on its own (the algorithm's requirements
against the backend and the training settings, environments, LoRA, learning rates), and the
warnings about settings that validate but cannot learn."""

from __future__ import annotations

import difflib
import importlib.util

from rlvr.api.host import PluginHost
from rlvr.api.registration import Requirements
from rlvr.config.run_config import RunConfig
from rlvr.config.sections import TrainingConfig


def requirements(config: RunConfig, host: PluginHost) -> Requirements:
    """The configured algorithm's requirements (defaults when no algorithm is configured)."""
    if config.algorithm is None:
        return Requirements()
    record = host.algorithms[config.algorithm.name]
    return record.requirements(config.algorithm.params)


def cross_check(config: RunConfig, host: PluginHost) -> list[tuple[str, str]]:
    """Checks no single section can make: the generic ones here, the rest from plugins."""
    problems: list[tuple[str, str]] = []
    labels: dict[str, int] = {}
    for i, entry in enumerate(config.rewards):
        if entry.key in labels:
            problems.append(
                (
                    f"rewards[{i}].label",
                    f"{entry.key!r} is already used by rewards[{labels[entry.key]}]; give each "
                    "entry of the same reward a distinct `label`",
                )
            )
        labels.setdefault(entry.key, i)
    marked = [i for i, entry in enumerate(config.rewards) if entry.correctness]
    for i in marked[1:]:
        problems.append(
            (
                f"rewards[{i}].correctness",
                f"rewards[{marked[0]}] is marked too; mark the one reward that decides correctness",
            )
        )
    if config.backend is not None:
        missing = host.backends[config.backend.name].available()
        if missing:
            problems.append(("backend.name", missing))
    if config.algorithm is not None:
        problems += _algorithm_checks(config, host)
    problems += _environment_checks(config, host)
    problems += _few_shot_checks(config, host)
    problems += _environment_reward_checks(config, host)
    problems += _lora_checks(config)
    problems += _learning_rate_checks(config.training)
    problems += host.validate_hooks(config)
    return problems


def multi_turn(config: RunConfig, host: PluginHost) -> bool:
    """Whether ``config``'s episodes have turns (an environment that is not ``single_turn``)."""
    env = config.environment
    return env is not None and host.environments[env.name].multi_turn


def _environment_reward_checks(config: RunConfig, host: PluginHost) -> list[tuple[str, str]]:
    """``environment.reward_weights`` names rewards the environment returns (when its record
    declares them), none of them a ``rewards[]`` label: both are logged as ``rewards/<name>``."""
    env = config.environment
    if env is None:
        return []
    record = host.environments[env.name]
    declared = record.rewards(env.params)
    labels = {entry.key for entry in config.rewards}
    problems = []
    for name in dict.fromkeys([*env.reward_weights, *(declared or ())]):
        path = f"environment.reward_weights.{name}"
        if name not in env.reward_weights:
            path = "environment.name"
        if declared is not None and name not in declared:
            have = f"it returns: {', '.join(declared)}" if declared else "it returns no rewards"
            hint = difflib.get_close_matches(name, declared, n=1)
            mean = f"did you mean {hint[0]!r}? " if hint else ""
            problems.append(
                (path, f"environment {env.name!r} returns no reward {name!r}; {mean}{have}")
            )
        elif name in labels:
            problems.append(
                (
                    path,
                    f"environment {env.name!r} returns a reward {name!r}, which is also a "
                    f"rewards[] label: both would be logged as rewards/{name}; give that "
                    "entry another `label`",
                )
            )
    return problems


def _environment_checks(config: RunConfig, host: PluginHost) -> list[tuple[str, str]]:
    """What multi-turn episodes cannot run with (yet): checked before any model loads."""
    if not multi_turn(config, host):
        return []
    assert config.environment is not None
    name = config.environment.name
    problems = []
    # Every backend runs them: a turn is a generate() call on the episode's token ids so far.
    if config.training.guidance is not None:
        problems.append(
            (
                "training.guidance",
                f"guidance writes a single-turn solution, which environment {name!r}'s "
                "multi-turn episodes cannot use; remove training.guidance",
            )
        )
    if config.data is not None and config.data.chat_template is False:
        problems.append(
            (
                "data.chat_template",
                f"environment {name!r} renders its conversations with the chat template; "
                "remove data.chat_template: false (or use environment.name: single_turn)",
            )
        )
    return problems


def _few_shot_checks(config: RunConfig, host: PluginHost) -> list[tuple[str, str]]:
    """A worked exchange with tool calls is shown by the episode runner, which writes the calls
    in the format it parses: a single completion has no one to answer a call."""
    if config.data is None or multi_turn(config, host):
        return []
    return [
        (
            f"data.few_shot[{i}].messages",
            "shows tool calls, which only a multi-turn environment answers; add environment: "
            "{name: tools, params: {tools: [...]}} (or drop the tool calls)",
        )
        for i, shot in enumerate(config.data.few_shot)
        if shot.has_tool_calls
    ]


PEFT_INSTALL_HINT = "LoRA needs peft: pip install 'rlvr[lora]'"


def peft_missing() -> str | None:
    """Why LoRA cannot run here (peft is not installed), or None."""
    return None if importlib.util.find_spec("peft") is not None else PEFT_INSTALL_HINT


def _lora_checks(config: RunConfig) -> list[tuple[str, str]]:
    """LoRA needs peft, and works with one process or DDP (FSDP would shard the adapters)."""
    if config.model is None or config.model.lora is None:
        return []
    problems = []
    missing = peft_missing()
    if missing:
        problems.append(("model.lora", missing))
    if config.training.parallelism == "fsdp":
        problems.append(
            (
                "training.parallelism",
                "fsdp does not support model.lora; use ddp (the default): with LoRA only the "
                "small adapters have gradients and optimizer state, most of what FSDP saves",
            )
        )
    return problems


#: The largest learning rate an Adam-family optimizer accepts.
MAX_ADAM_LR = 1.0


def _learning_rate_checks(t: TrainingConfig) -> list[tuple[str, str]]:
    """Adam moves every weight by about ``learning_rate`` per step, whatever the gradients' scale;
    past 1 that is more than any weight of a trained model (typically 0.01-0.1): the first update
    turns the weights to noise, so no run can want it (SGD's step scales with the gradient, so
    there a large value is only a warning, :func:`learning_warnings`)."""
    if t.optim == "sgd" or t.learning_rate <= MAX_ADAM_LR:
        return []
    return [
        (
            "training.learning_rate",
            f"{t.learning_rate:g} is not a learning rate for {t.optim}: Adam moves every weight "
            f"by about the learning rate each step, so anything past {MAX_ADAM_LR:g} turns the "
            "weights to noise in one update; RL fine-tuning uses about 1e-6 (1e-5 with LoRA), "
            "the quickstart's tiny model 1e-3",
        )
    ]


def _algorithm_checks(config: RunConfig, host: PluginHost) -> list[tuple[str, str]]:
    """The algorithm's :class:`Requirements` against the training settings and backend."""
    assert config.algorithm is not None
    problems = []
    req = requirements(config, host)
    name = config.algorithm.name
    n = config.training.num_generations
    if n < req.min_group_size:
        problems.append(
            (
                "training.num_generations",
                f"{name} compares completions of the same prompt and needs at least "
                f"{req.min_group_size} per prompt (got {n}); set training.num_generations "
                f">= {req.min_group_size}",
            )
        )
    if config.backend is None:
        return problems
    caps = host.backends[config.backend.name].capabilities
    bname = config.backend.name
    if req.sampler_logprobs and config.training.guidance is not None:
        problems.append(
            (
                "training.guidance",
                f"these {name} params correct for the sampler's log-probabilities "
                "(importance_sampling_correction), and a guide completion was never sampled; "
                "turn one of them off",
            )
        )
    stale = config.training.max_staleness
    if stale and not req.sampler_logprobs:
        problems.append(
            (
                "training.max_staleness",
                f"{stale} trains on samples from weights up to {stale} updates old, and these "
                f"{name} params do not correct for that; set algorithm.params."
                "importance_sampling_correction: true (or max_staleness: 0)",
            )
        )
    if stale and config.training.parallelism == "fsdp":
        problems.append(
            (
                "training.max_staleness",
                f"{stale} with training.parallelism: fsdp is not supported: the rollouts "
                "would need the sharded weights gathered while the trainer trains them; use "
                "ddp (the default), or max_staleness: 0",
            )
        )
    # Asynchronous rollouts ask every backend for the sampler's log-probs (hf computes them
    # on request); a synchronous hf run samples from the trained weights: nothing to correct.
    if req.sampler_logprobs and not caps.sampler_logprobs and not stale:
        problems.append(
            (
                "backend.name",
                f"{name} needs the sampler's log-probabilities, which backend {bname!r} "
                "does not return; use a backend that does (e.g. vllm)",
            )
        )
    if req.reference_model and not caps.reference_logprobs:
        key = req.reference_model_param
        path = f"algorithm.params.{key}" if key else "algorithm"
        fix = f"set {path}: 0" if key else "use a backend that can, or another algorithm"
        problems.append(
            (
                path,
                f"these {name} params need a reference model, which backend {bname!r} "
                f"cannot provide; {fix}",
            )
        )
    return problems


def learning_warnings(config: RunConfig, host: PluginHost) -> list[str]:
    """Settings that validate but cannot learn anything."""
    out = []
    env = config.environment
    env_scores = env is not None and env.name != "single_turn"  # its own rewards weigh 1.0
    if config.rewards and all(e.weight == 0 for e in config.rewards) and not env_scores:
        out.append("every reward has weight 0: all completions score 0 and nothing is learned")
    req = requirements(config, host)
    greedy = config.training.temperature == 0 or config.training.top_k == 1
    if config.algorithm is not None and req.min_group_size > 1 and greedy:
        out.append(
            f"training.temperature: 0 (or top_k: 1) samples greedily, so the completions "
            f"of a prompt are identical and {config.algorithm.name}, which compares them, "
            "learns nothing; use a temperature around 1"
        )
    t = config.training
    if t.optim == "sgd" and t.learning_rate > MAX_ADAM_LR:
        out.append(
            f"training.learning_rate: {t.learning_rate:g} with sgd moves the weights by up to "
            f"{t.learning_rate:g} x max_grad_norm ({t.max_grad_norm:g}) per step; a run whose "
            "update blows the weights up stops at that step"
        )
    if t.max_steps > 0 and max(t.warmup_steps, 0) >= t.max_steps:
        out.append(
            f"training.warmup_steps: {t.warmup_steps} >= max_steps {t.max_steps}: the learning "
            "rate never reaches learning_rate; use fewer warm-up steps (or warmup_ratio)"
        )
    return out
