"""The models a training run holds, loaded fresh or from the checkpoint it resumes.

- the policy and its tokenizer: under LoRA (``model.lora``) the base model wrapped with its
  adapters (new ones, or the checkpoint's), otherwise the full model (the checkpoint's weights
  on resume);
- the reference model, when the algorithm asks for one: the base model, loaded a second time
  and frozen; under LoRA none, since the policy with its adapters switched off is the base (no
  second copy in memory);
- the value model, when the algorithm asks for one (built by the algorithm, on the policy's
  backbone).

Precision (:data:`rlvr.model.loading.TRAINED_DTYPE`): every weight the optimizer updates is float32;
``dtype`` (bfloat16 by default on CUDA and on a CPU with native bfloat16) is what the passes
compute in, under autocast, and what the frozen weights are stored in: under LoRA the base
model; the full fine-tuning reference keeps the layers autocast leaves in float32 (embeddings,
norms) in float32, so it computes exactly what the policy computed at step 0
(:func:`rlvr.model.loading.store_as_autocast_computes`).

Dropout is off in all of them (RL ratios compare two forward passes). Gradient checkpointing
and FSDP sharding are applied here too, so the trainer gets models ready to train.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.api.registration import Requirements
from rlvr.config.schema import ModelConfig, TrainingConfig
from rlvr.model import lora
from rlvr.model.loading import (
    TRAINED_DTYPE,
    enable_gradient_checkpointing,
    load_policy,
    store_as_autocast_computes,
)
from rlvr.parallel import distributed


def disable_dropout(model: torch.nn.Module) -> None:
    """Zero every dropout: RL ratios compare log-probs of two forward passes, which dropout
    would make disagree even with identical weights."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name in ("attention_dropout", "dropout_p"):
            if isinstance(getattr(m, name, None), float):
                setattr(m, name, 0.0)


@dataclass
class RunModels:
    policy: Any
    tokenizer: Any
    #: a frozen base model; None when not needed, or under LoRA (the policy, adapters off)
    reference: Any | None
    #: the reference is the policy with its LoRA adapters off (``reference`` is then None)
    reference_is_base: bool
    value_model: Any | None
    #: what pads completions: the tokenizer's pad token, else its EOS, else 0
    pad_id: int


def load_run_models(
    model_cfg: ModelConfig,
    training: TrainingConfig,
    req: Requirements,
    algorithm: Any,
    dist: distributed.Dist,
    *,
    device: Any,
    dtype: Any,
    resume_from: Path | None = None,
) -> RunModels:
    """Load the run's models on ``device``, computing in ``dtype``; ``algorithm`` builds the
    value model when ``req.value_model`` says one is needed."""
    lora_cfg = model_cfg.lora
    policy_cfg = model_cfg
    if resume_from is not None and lora_cfg is None:  # the checkpoint holds the whole model
        policy_cfg = model_cfg.model_copy(
            update={"name_or_path": str(resume_from), "gguf_file": None, "revision": None}
        )
    # Full fine-tuning trains every weight, so all are loaded in float32 (read exactly from a
    # bfloat16 checkpoint, not rounded through one); under LoRA the base is frozen.
    policy, tokenizer = load_policy(
        policy_cfg, device=device, dtype=dtype if lora_cfg is not None else TRAINED_DTYPE
    )
    disable_dropout(policy)
    if lora_cfg is not None:  # after disable_dropout: the adapters keep lora.dropout
        if resume_from is None:
            policy = lora.add_adapters(policy, lora_cfg)
        else:
            policy = lora.load_adapters(policy, resume_from, trainable=True)
        trained_in_float32(policy)  # the adapters and any modules_to_save

    reference = None
    reference_is_base = req.reference_model and lora_cfg is not None
    if req.reference_model and not reference_is_base:
        # The base (on resume too: not the checkpoint), read again in float32 like the policy,
        # then stored as autocast computes with it, so that it equals the policy at step 0.
        reference, _ = load_policy(model_cfg, device=device, dtype=TRAINED_DTYPE)
        reference.eval().requires_grad_(False)
        store_as_autocast_computes(reference, dtype)
        disable_dropout(reference)

    value_model = None
    if req.value_model:
        # LoRA: from the transformers model inside peft, so the value model's copy of the
        # backbone is frozen too and trains its own adapters (and its head).
        value_model = algorithm.build_value_model(lora.forward_model(policy)).to(device)
        trained_in_float32(value_model)
        disable_dropout(value_model)

    if training.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
        if value_model is not None:
            value_model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )

    if dist.enabled and training.parallelism == "fsdp":  # the reference stays whole
        distributed.shard(policy, dist, dtype, cpu_offload=training.fsdp_cpu_offload)
    return RunModels(
        policy, tokenizer, reference, reference_is_base, value_model, pad_token_id(tokenizer)
    )


def trained_in_float32(model: Any) -> None:
    """Cast the weights that train (``requires_grad``) to float32 in place, leaving the frozen
    ones in their dtype: peft keeps a 16-bit base's adapters in float32, but not every module
    it trains (``modules_to_save`` copies), nor a value head built beside them."""
    for param in model.parameters():
        if param.requires_grad and param.is_floating_point() and param.dtype != TRAINED_DTYPE:
            param.data = param.data.to(TRAINED_DTYPE)


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad token, else its EOS, else 0 (padding is masked out anyway)."""
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            return value
    return 0
