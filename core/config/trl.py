"""TRL compatibility: a ``GRPOConfig`` block pasted into ``training:`` works unchanged.

Two tables, applied to the raw config dict before validation (:func:`move_trl_keys`):

- :data:`TRL_IGNORED`: TRL keys rlvr accepts and ignores, each with why and what to do
  instead; each one present gives a one-line :class:`ConfigWarning`.
- :data:`TRL_ALGORITHM_KEYS`: TRL keys that are an algorithm's params in rlvr (``beta``,
  ``epsilon``...); moved to ``algorithm.params`` when the configured algorithm has them.

``reward_weights`` is a problem that spells out the ``rewards[i].weight`` entries to write.
"""

from __future__ import annotations

import warnings
from typing import Any

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import Host

#: TRL keys accepted and ignored, with why (and what to do instead).
TRL_IGNORED = {
    "bf16": "rlvr picks bf16 on CUDA automatically (model.dtype)",
    "fp16": "rlvr picks the dtype automatically (model.dtype)",
    "use_vllm": "choose the generator with backend.name: vllm",
    "vllm_mode": "set backend params instead",
    "vllm_gpu_memory_utilization": "set backend.params.gpu_memory_utilization",
    "log_completions": "rlvr always writes samples.jsonl",
    "remove_unused_columns": "rlvr passes every column to the rewards",
    "dataloader_num_workers": "rlvr reads data in-process",
    "logging_dir": "logs go to output_dir",
    "overwrite_output_dir": "rlvr never deletes a run; use a new output_dir",
    "do_train": "not used",
    "push_to_hub": "not supported offline",
    "eval_strategy": "rlvr evaluates every training.eval_steps steps when that is set",
    "per_device_eval_batch_size": "evaluation generates in calls the size of a training step's",
}

#: TRL keys that belong to an algorithm's params in rlvr.
TRL_ALGORITHM_KEYS = (
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "loss_type",
    "num_iterations",
    "mask_truncated_completions",
    "delta",
)


def move_trl_keys(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """Drop :data:`TRL_IGNORED` keys from ``data["training"]`` with a warning each, and move
    :data:`TRL_ALGORITHM_KEYS` to ``algorithm.params`` when the algorithm has them (a key the
    algorithm lacks stays, and validation reports it). Changes ``data`` in place; returns the
    problems found (a key set in both places)."""
    training = data.get("training")
    if not isinstance(training, dict):
        return []
    training = data["training"] = dict(training)
    for key, why in TRL_IGNORED.items():
        if key in training:
            training.pop(key)
            warnings.warn(f"training.{key} is ignored: {why}", ConfigWarning, stacklevel=2)
    problems = _reward_weights(training)
    algo = data.get("algorithm")
    record = host.algorithms.get(str(algo.get("name"))) if isinstance(algo, dict) else None
    for key in TRL_ALGORITHM_KEYS:
        if key not in training or record is None or key not in record.params.model_fields:
            continue
        algo = data["algorithm"] = dict(data["algorithm"])
        params = algo["params"] = dict(algo.get("params") or {})
        if key in params and params[key] != training[key]:
            msg = f"also set as algorithm.params.{key}; keep only one"
            problems.append((f"training.{key}", msg))
        params.setdefault(key, training.pop(key))
    return problems


def _reward_weights(training: dict[str, Any]) -> list[tuple[str, str]]:
    """TRL's ``reward_weights`` list is each ``rewards[]`` entry's ``weight`` in rlvr: a problem
    that spells out the entries to write (dropped silently, the weights would be lost)."""
    if "reward_weights" not in training:
        return []
    weights = training.pop("reward_weights")
    if isinstance(weights, list) and weights:
        spelled = ", ".join(f"rewards[{i}].weight: {w}" for i, w in enumerate(weights))
        fix = f"set {spelled}"
    else:
        fix = "set each entry's weight"
    return [("training.reward_weights", f"rlvr weighs each rewards[] entry on its own: {fix}")]
