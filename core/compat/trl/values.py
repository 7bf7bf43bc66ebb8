"""The value-dependent handling of TRL keys (each a :class:`~rlvr.compat.trl.paste.TrlKey`'s
``apply``): where TRL's unit or spelling differs from rlvr's, the value is translated on its way
into rlvr's sections; the table (:mod:`rlvr.compat.trl.keys`) names which key uses which."""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Callable
from typing import Any

from rlvr.api.errors import ConfigWarning
from rlvr.compat.trl.paste import Paste


def apply_steps(p: Paste, key: str, value: Any) -> None:
    """A step count: TRL counts optimizer steps, rlvr rollouts of ``num_iterations`` updates
    each; and TRL reads a value below 1 as a ratio of the run's steps."""
    target = f"training.{key}"
    if not p.trl:
        p.put(key, target, value)
        return
    if key != "max_steps" and isinstance(value, float) and 0 < value < 1:
        p.problem(key, f"{value} is a ratio of the run's steps in TRL; give a step count")
        return
    mu = p.effective("num_iterations")
    if not isinstance(value, int | float) or not isinstance(mu, int) or mu <= 1 or value <= 0:
        p.put(key, target, int(value) if isinstance(value, float) and value.is_integer() else value)
        return
    if value % mu:
        p.problem(
            key,
            f"TRL counts optimizer steps and rlvr steps of num_iterations {mu} updates each "
            f"(one generation); {value:g} is not a whole number of them: use a multiple of {mu}",
        )
        return
    p.put(key, target, int(value // mu))


def apply_batch(p: Paste, key: str, value: Any) -> None:
    """TRL's ``per_device_train_batch_size`` counts completions; rlvr's counts prompts."""
    if not p.trl or not isinstance(value, int) or isinstance(value, bool):
        p.put(key, "training.per_device_train_batch_size", value)
        return
    g, accum = p.effective("num_generations"), p.effective("gradient_accumulation_steps")
    if not isinstance(g, int) or g < 1:
        p.put(key, "training.per_device_train_batch_size", value)  # num_generations: reported
        return
    if value % g == 0:
        p.put(key, "training.per_device_train_batch_size", value // g)
        return
    fix = f"use a multiple of {g}"
    if key in p.filled:  # TRL refuses it too: its generation batch must hold whole groups
        p.problems.append(
            (
                f"{p.block}.{key}",
                f"left out, so TRL's default of {value} completions, which are not whole groups "
                f"of num_generations {g}: set it ({fix})",
            )
        )
        return
    if isinstance(accum, int) and (value * accum) % g == 0:
        fix += (
            f", e.g. {g} with gradient_accumulation_steps: {value * accum // g} for the same "
            f"{value * accum} completions per step"
        )
    p.problem(
        key,
        f"{value} completions are not whole groups of num_generations {g}; rlvr's micro-batches "
        f"hold whole groups: {fix}",
    )


def apply_generation_batch(p: Paste, key: str, value: Any) -> None:
    """``steps_per_generation`` / ``generation_batch_size``: rlvr generates once per optimizer
    step, TRL's default (``steps_per_generation = gradient_accumulation_steps``)."""
    if value is None:
        return
    accum = p.effective("gradient_accumulation_steps")
    why = (
        "rlvr generates once per optimizer step (TRL's default, steps_per_generation = "
        "gradient_accumulation_steps); for several updates per generation set "
        "algorithm.params.num_iterations"
    )
    if not p.trl:
        p.problem(key, f"counts in TRL's units: paste the GRPOConfig under `trl:`; {why}")
        return
    if key == "steps_per_generation":
        if value != accum:
            p.problem(key, f"{value} != gradient_accumulation_steps {accum}: {why}")
        return
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per = p.effective("per_device_train_batch_size")
    step = per * world * accum if isinstance(per, int) and isinstance(accum, int) else None
    if value != step:
        p.problem(
            key,
            f"{value} completions per generation != per_device_train_batch_size x processes x "
            f"gradient_accumulation_steps ({step}): {why}",
        )


def apply_warmup(p: Paste, key: str, value: Any) -> None:
    """transformers 5 reads ``warmup_steps`` below 1 as a ratio of the run's updates; a count
    is TRL's optimizer steps in ``trl:``, divided by ``num_iterations`` as ``max_steps``."""
    if isinstance(value, float) and 0 < value < 1:
        p.put(key, "training.warmup_ratio", value)
    else:
        apply_steps(p, key, value)


_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
_MAX_TOKENS = ("max_tokens", "max_new_tokens")


def apply_generation_kwargs(p: Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is None:
        return
    for name, v in value.items():
        if name in _SAMPLING:
            p.put(f"{key}.{name}", f"training.{name}", v)
        elif name in _MAX_TOKENS:
            p.put(f"{key}.{name}", "training.max_completion_length", v)
        elif name == "do_sample" and v is True:
            continue
        else:
            p.problem(
                f"{key}.{name}",
                "rlvr's backends sample with training.temperature, top_p, top_k, min_p, "
                f"repetition_penalty and max_completion_length only; {name} has no equivalent",
            )


_MODEL_KWARGS = {
    "dtype": "model.dtype",
    "torch_dtype": "model.dtype",
    "attn_implementation": "model.attn_implementation",
    "revision": "model.revision",
    "trust_remote_code": "model.trust_remote_code",
}


def apply_model_init_kwargs(p: Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is None:
        return
    for name, v in value.items():
        target = _MODEL_KWARGS.get(name)
        if target is None:
            p.problem(
                f"{key}.{name}",
                "rlvr loads the model itself from the model: section, which takes dtype, "
                f"attn_implementation, revision and trust_remote_code; {name} has no equivalent",
            )
            continue
        if target == "model.dtype" and isinstance(v, str):
            v = v.removeprefix("torch.")
        p.put(f"{key}.{name}", target, v)


def _mapping(p: Paste, key: str, value: Any) -> dict[str, Any] | None:
    """A dict-valued TRL key (TRL also takes it as a JSON string); None and {} ask nothing."""
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        p.problem(key, f"must be a mapping, e.g. {{key: value}} (got {value!r})")
        return None
    return value


def apply_chat_template_kwargs(p: Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is not None:
        p.put(key, "data.chat_template_kwargs", value)


def apply_use_vllm(p: Paste, key: str, value: Any) -> None:
    p.put(key, "backend.name", "vllm" if value else "hf")
    if value and "vllm_importance_sampling_correction" not in p.values:
        warnings.warn(
            f"{p.block}.use_vllm: TRL corrects for vLLM's sampling by default "
            "(vllm_importance_sampling_correction, mode sequence_mask); rlvr does not unless "
            "algorithm.params.importance_sampling_correction: true (truncated per token, "
            "TRL's token_truncate)",
            ConfigWarning,
            stacklevel=4,
        )


def vllm_param(param: str) -> Callable[[Paste, str, Any], None]:
    """A vLLM setting: the vllm backend's ``param``; without vLLM unused, as in TRL."""

    def apply(p: Paste, key: str, value: Any) -> None:
        if p.backend() == "vllm":
            p.put(key, f"backend.params.{param}", value)

    return apply


def apply_vllm_mode(p: Paste, key: str, value: Any) -> None:
    if value != "colocate":
        p.problem(
            key,
            f"{value!r}: rlvr's vllm backend runs vLLM in the training process (TRL's "
            "'colocate'); there is no server mode: remove it or set 'colocate'",
        )


def apply_is_correction(p: Paste, key: str, value: Any) -> None:
    """TRL's vLLM importance-sampling correction: rlvr's is TRL's ``token_truncate`` mode."""
    if p.backend() != "vllm" or not value:
        if p.backend() == "vllm":
            p.put(key, "algorithm.params.importance_sampling_correction", False)
        return  # TRL applies it with vLLM only
    mode = p.values.get("vllm_importance_sampling_mode", "sequence_mask")
    if mode != "token_truncate":
        p.problem(
            key,
            f"TRL's mode {mode!r} (its default is sequence_mask) is not in rlvr, whose "
            "correction truncates per token: set vllm_importance_sampling_mode: token_truncate, "
            "or vllm_importance_sampling_correction: false",
        )
        return
    p.put(key, "algorithm.params.importance_sampling_correction", True)


def apply_is_cap(p: Paste, key: str, value: Any) -> None:
    on = p.values.get("vllm_importance_sampling_correction", False)
    if p.backend() == "vllm" and on and value is not None:
        p.put(key, "algorithm.params.importance_sampling_cap", value)


def apply_loss_type(p: Paste, key: str, value: Any) -> None:
    if value == "cispo":
        p.problem(key, "TRL's cispo loss is rlvr's algorithm: set algorithm.name: cispo instead")
    elif value in ("sapo", "luspo", "vespo"):
        p.problem(
            key,
            f"rlvr has no {value} loss; its losses: grpo, bnpo, dapo, dr_grpo (and the cispo "
            "and gspo algorithms)",
        )
    else:
        p.put(key, "algorithm.params.loss_type", value)


def apply_aggregation(p: Paste, key: str, value: Any) -> None:
    if value != "sum_then_normalize":
        p.problem(
            key,
            f"{value!r}: rlvr sums the weighted rewards, then normalises the sum per group "
            "(TRL's sum_then_normalize, its default); per-reward normalisation (GDPO) would "
            "be an algorithm plugin: remove the key to train with sum_then_normalize",
        )


def apply_eval_strategy(p: Paste, key: str, value: Any) -> None:
    """TRL evaluates every ``eval_steps`` (default: ``logging_steps``) with ``steps`` and never
    with ``no`` (its default, ``eval_steps`` or not); rlvr whenever ``eval_steps`` is set."""
    steps = p.values.get("eval_steps")
    if value == "no":
        if steps is not None and not p.trl:
            p.problem(
                key, "'no' turns evaluation off but training.eval_steps turns it on; keep one"
            )
        return
    if value != "steps":
        p.problem(
            key,
            f"{value!r}: rlvr evaluates every training.eval_steps steps; set eval_strategy: "
            "steps with eval_steps (steps per epoch = rows / prompts per step)",
        )
        return
    if steps is None:
        apply_steps(p, "eval_steps", p.effective("logging_steps"))
    if p.trl:  # TRL's eval: sampled with the training settings, num_generations_eval each
        p.put(key, "training.eval_sampling", "train")
        n = p.values.get("num_generations_eval") or p.effective("num_generations")
        p.put(key, "training.eval_num_generations", n)
        if "eval_on_start" not in p.values:
            p.put(key, "training.eval_on_start", False)


def apply_eval_steps(p: Paste, key: str, value: Any) -> None:
    if not p.trl:
        p.put(key, "training.eval_steps", value)
    elif p.values.get("eval_strategy", "no") == "steps":
        apply_steps(p, key, value)
    elif value is not None:
        p.ignore(key, "eval_strategy is 'no' (TRL's default): TRL does not evaluate either")


def apply_eval_generations(p: Paste, key: str, value: Any) -> None:
    if value is None or (p.trl and p.values.get("eval_strategy") == "steps"):
        return  # with eval_strategy: steps, eval_strategy sets it
    p.put(key, "training.eval_num_generations", value)
    if value > 1:
        p.put(key, "training.eval_sampling", "train")


def apply_save_strategy(p: Paste, key: str, value: Any) -> None:
    if value == "no":
        p.ignore(
            key,
            "rlvr always saves the last step (and a stopped run) for --resume, and every "
            "training.save_steps: raise save_steps to save fewer",
        )
    elif value != "steps":
        p.problem(
            key,
            f"{value!r}: rlvr saves every training.save_steps steps; set save_strategy: steps "
            "with save_steps (steps per epoch = rows / prompts per step)",
        )


def apply_logging_strategy(p: Paste, key: str, value: Any) -> None:
    if value != "steps":
        p.ignore(key, "rlvr logs every step to metrics.jsonl and prints every logging_steps")


def apply_fsdp(p: Paste, key: str, value: Any) -> None:
    if value is True:
        value = "full_shard"
    options = value.split() if isinstance(value, str) else list(value or [])
    if not options:
        return
    p.put(key, "training.parallelism", "fsdp")
    if "offload" in options:
        p.put(key, "training.fsdp_cpu_offload", True)


def reward_weights(block: str, weights: Any) -> list[tuple[str, str]]:
    """TRL's ``reward_weights`` list is each ``rewards[]`` entry's ``weight`` in rlvr: a problem
    that spells out the entries to write (dropped silently, the weights would be lost)."""
    if weights is None:
        return []
    if isinstance(weights, list) and weights:
        spelled = ", ".join(f"rewards[{i}].weight: {w}" for i, w in enumerate(weights))
        fix = f"set {spelled}"
    else:
        fix = "set each entry's weight"
    return [(f"{block}.reward_weights", f"rlvr weighs each rewards[] entry on its own: {fix}")]
