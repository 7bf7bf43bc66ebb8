"""The table: every key of TRL 1.16's ``GRPOConfig`` decided, as declared data.

Each key is one :class:`~rlvr.compat.trl.paste.TrlKey`: ``mapped`` (an rlvr ``training`` key of
the same name and meaning), ``moved`` (another rlvr home, its value translated where TRL's unit
differs), ``ignored`` (no effect in rlvr; a one-line :class:`~rlvr.plugin.ConfigWarning` says why,
unless the value is *inert*: asks for what rlvr does anyway), or ``error`` (asks for a behaviour
rlvr lacks; one problem line with the fix, unless the value is inert). A key's value-dependent
handling is its ``apply`` (:mod:`rlvr.compat.trl.values`). ``tests/test_trl_keys.py`` checks
the table against the fields TRL declares. This module is a declared data table, exempt from
the 600-line limit on core modules (it grows with TRL's keys); :func:`trl_keys_markdown`
renders it for the docs.
"""

from __future__ import annotations

import json
from typing import Any

from rlvr.compat.trl.paste import Kind, TrlKey
from rlvr.compat.trl.values import (
    apply_aggregation,
    apply_batch,
    apply_chat_template_kwargs,
    apply_eval_generations,
    apply_eval_steps,
    apply_eval_strategy,
    apply_fsdp,
    apply_generation_batch,
    apply_generation_kwargs,
    apply_is_cap,
    apply_is_correction,
    apply_logging_strategy,
    apply_loss_type,
    apply_model_init_kwargs,
    apply_save_strategy,
    apply_steps,
    apply_use_vllm,
    apply_vllm_mode,
    apply_warmup,
    reward_weights,
    vllm_param,
)


def _inert_or(kind: Kind, reason: str, *inert: Any) -> TrlKey:
    return TrlKey(kind, reason=reason, inert=inert)


def _moved(target: str, reason: str = "", apply: Any = None) -> TrlKey:
    return TrlKey("moved", target, reason or "same meaning", apply=apply)


def _mapped(reason: str = "same name and meaning", apply: Any = None) -> TrlKey:
    return TrlKey("mapped", "", reason, apply=apply)


def _algo(field: str, reason: str = "same meaning") -> TrlKey:
    return _moved(f"algorithm.params.{field}", reason)


def _group(kind: Kind, reason: str, **defaults: Any) -> dict[str, TrlKey]:
    """One decision for several keys (e.g. every ``hub_*`` key), each inert at its TRL
    default (given as ``key=default``)."""
    return {k: TrlKey(kind, reason=reason, inert=(v,)) for k, v in defaults.items()}


# --------------------------------------------------------------------------- the table

_HUB = "rlvr does not push to the Hub; upload training.output_dir yourself"
_EVAL = "rlvr's eval generates and scores (rewards, pass@k): no loss, logits or metrics fn"
_LOADER = "rlvr reads the prompts in-process; there is no DataLoader"
_DDP = "rlvr sets up DDP itself (torchrun, training.parallelism)"
_VLLM_SERVER = "server mode only; rlvr runs vLLM in the training process"
_COMPILE = "rlvr does not torch.compile the model"
_LOG = "rlvr logs every step to metrics.jsonl (rank 0) and prints every logging_steps"

#: Every key of TRL's ``GRPOConfig`` (its own and those it inherits from transformers'
#: ``TrainingArguments``), and a few of older TRL versions (:data:`OLDER_TRL_KEYS`).
TRL_KEYS: dict[str, TrlKey] = {
    # ---- same name and meaning as rlvr's training key
    "output_dir": _mapped(),
    "seed": _mapped(),
    "learning_rate": _mapped(),
    "adam_beta1": _mapped(),
    "adam_beta2": _mapped(),
    "adam_epsilon": _mapped(),
    "weight_decay": _mapped(),
    "optim": _mapped("same meaning; rlvr has adamw_torch, adamw_torch_fused, adamw, sgd"),
    "lr_scheduler_type": _mapped(
        "same meaning; rlvr has linear, cosine, constant, constant_with_warmup, cosine_with_min_lr"
    ),
    "warmup_steps": _mapped(
        "in trl: TRL's optimizer steps, divided by num_iterations as max_steps; below 1 a "
        "ratio of the run's updates (transformers 5), i.e. training.warmup_ratio",
        apply_warmup,
    ),
    "max_grad_norm": _mapped(),
    "gradient_accumulation_steps": _mapped(),
    "num_generations": _mapped(),
    "max_completion_length": _mapped(),
    "num_train_epochs": _mapped("same meaning (each prompt once per epoch)"),
    "temperature": _mapped(),
    "top_p": _mapped(),
    "top_k": _mapped("same meaning (0: off)"),
    "min_p": _mapped(),
    "repetition_penalty": _mapped(),
    "save_total_limit": _mapped(),
    "report_to": _mapped(
        "same meaning; rlvr has none, tensorboard, wandb, trackio, mlflow, all (and any logger "
        "plugin)"
    ),
    "gradient_checkpointing": _mapped(),
    "eval_on_start": _mapped(),
    "per_device_train_batch_size": _mapped(
        "in trl: completions, divided by num_generations into rlvr's prompts (must be whole "
        "groups); under training: rlvr's prompts",
        apply_batch,
    ),
    "max_steps": _mapped(
        "in trl: TRL's optimizer steps, divided by num_iterations into rlvr's steps", apply_steps
    ),
    "save_steps": _mapped("in trl: divided by num_iterations, as max_steps", apply_steps),
    "logging_steps": _mapped("in trl: divided by num_iterations, as max_steps", apply_steps),
    "eval_steps": _mapped(
        "in trl: only with eval_strategy: steps (as in TRL), divided by num_iterations",
        apply_eval_steps,
    ),
    # ---- another home in rlvr
    "beta": _algo("beta"),
    "epsilon": _algo("epsilon"),
    "epsilon_high": _algo("epsilon_high"),
    "delta": _algo("delta"),
    "num_iterations": _algo("num_iterations"),
    "scale_rewards": _algo("scale_rewards", "same meaning (true: group, false: none)"),
    "mask_truncated_completions": _algo("mask_truncated_completions"),
    "importance_sampling_level": _algo("level", "same meaning (token or sequence)"),
    "loss_type": _moved(
        "algorithm.params.loss_type",
        "grpo, bnpo, dapo, dr_grpo; cispo is rlvr's cispo algorithm; sapo, luspo, vespo: errors",
        apply_loss_type,
    ),
    "trust_remote_code": _moved("model.trust_remote_code"),
    "model_init_kwargs": _moved(
        "model.*",
        "dtype/torch_dtype -> model.dtype, attn_implementation, revision, trust_remote_code; "
        "other kwargs: errors",
        apply_model_init_kwargs,
    ),
    "shuffle_dataset": _moved("data.shuffle"),
    "chat_template_kwargs": _moved(
        "data.chat_template_kwargs",
        "passed to apply_chat_template (e.g. enable_thinking)",
        apply_chat_template_kwargs,
    ),
    "generation_kwargs": _moved(
        "training.*",
        "temperature, top_p, top_k, min_p, repetition_penalty, max_tokens/max_new_tokens "
        "(-> max_completion_length); other kwargs: errors",
        apply_generation_kwargs,
    ),
    "use_vllm": _moved("backend.name", "true: vllm, false: hf", apply_use_vllm),
    "vllm_gpu_memory_utilization": _moved(
        "backend.params.gpu_memory_utilization",
        "with backend vllm",
        vllm_param("gpu_memory_utilization"),
    ),
    "vllm_tensor_parallel_size": _moved(
        "backend.params.tensor_parallel_size",
        "with backend vllm",
        vllm_param("tensor_parallel_size"),
    ),
    "vllm_max_model_length": _moved(
        "backend.params.max_model_len", "with backend vllm", vllm_param("max_model_len")
    ),
    "vllm_enable_sleep_mode": _moved(
        "backend.params.sleep_mode", "with backend vllm", vllm_param("sleep_mode")
    ),
    "vllm_importance_sampling_correction": _moved(
        "algorithm.params.importance_sampling_correction",
        "with backend vllm; rlvr's correction is TRL's token_truncate mode (other modes: errors)",
        apply_is_correction,
    ),
    "vllm_importance_sampling_mode": _moved(
        "algorithm.params.importance_sampling_correction",
        "token_truncate only (read with vllm_importance_sampling_correction)",
        lambda p, key, value: None,
    ),
    "vllm_importance_sampling_clip_max": _moved(
        "algorithm.params.importance_sampling_cap", "with the correction on", apply_is_cap
    ),
    "vllm_importance_sampling_cap": _moved(
        "algorithm.params.importance_sampling_cap", "deprecated TRL name of clip_max", apply_is_cap
    ),
    "per_device_eval_batch_size": _moved(
        "training.eval_batch_size", "completions per eval generation call"
    ),
    "num_generations_eval": _moved(
        "training.eval_num_generations",
        "sampled with the training settings (eval_sampling: train), as TRL does",
        apply_eval_generations,
    ),
    "eval_strategy": _moved(
        "training.eval_steps",
        "steps: evaluate every eval_steps (default logging_steps), sampled, no eval at step 0 "
        "unless eval_on_start; no: never; epoch: error",
        apply_eval_strategy,
    ),
    "fsdp": _moved(
        "training.parallelism",
        "any sharding: fsdp (FSDP2, per decoder layer); offload: fsdp_cpu_offload",
        apply_fsdp,
    ),
    # ---- value-dependent: some values are errors
    "steps_per_generation": TrlKey(
        "error",
        reason="in trl: must equal gradient_accumulation_steps (rlvr generates once per "
        "optimizer step; more updates per generation: algorithm.params.num_iterations)",
        apply=apply_generation_batch,
    ),
    "generation_batch_size": TrlKey(
        "error",
        reason="in trl: must equal per_device_train_batch_size x processes x "
        "gradient_accumulation_steps (one generation per optimizer step)",
        apply=apply_generation_batch,
    ),
    "multi_objective_aggregation": TrlKey(
        "error",
        reason="sum_then_normalize is what rlvr does; normalize_then_sum (GDPO) is not in rlvr",
        apply=apply_aggregation,
    ),
    "vllm_mode": TrlKey(
        "error",
        reason="colocate is rlvr's vllm backend; server mode is not in rlvr",
        apply=apply_vllm_mode,
    ),
    "save_strategy": TrlKey(
        "ignored",
        reason="steps: save_steps; no: rlvr still saves the last step (for --resume); "
        "epoch, best: errors",
        apply=apply_save_strategy,
    ),
    "logging_strategy": TrlKey("ignored", reason=_LOG, apply=apply_logging_strategy),
    "reward_weights": TrlKey(
        "error",
        reason="each rewards[] entry has its own weight: the message spells them out",
        apply=lambda p, key, value: p.problems.extend(reward_weights(p.block, value)),
    ),
    "vllm_importance_sampling_clip_min": _inert_or(
        "error", "rlvr's correction only truncates from above (importance_sampling_cap)", None
    ),
    "router_aux_loss_coef": _inert_or("error", "rlvr adds no MoE load-balancing loss", None),
    "sync_ref_model": _inert_or(
        "error",
        "rlvr's reference model stays the initial policy (TR-DPO sync is not in rlvr)",
        False,
    ),
    "top_entropy_quantile": _inert_or(
        "error", "rlvr keeps every token in the loss (no entropy masking)", 1.0
    ),
    "entropy_coef": _inert_or("error", "rlvr adds no entropy bonus to the loss", 0.0),
    "use_adaptive_entropy": _inert_or("error", "rlvr adds no entropy bonus to the loss", False),
    "off_policy_mask_threshold": _inert_or(
        "error", "rlvr has no off-policy sequence masking (DeepSeek-V3.2)", None
    ),
    "max_tool_calling_iterations": _inert_or(
        "error", "rlvr generates one completion per sample: no tool calling", None
    ),
    "vllm_structured_outputs_regex": _inert_or(
        "error", "rlvr's vllm backend has no structured outputs", None
    ),
    "neftune_noise_alpha": _inert_or("error", "rlvr adds no NEFTune noise", None),
    "auto_find_batch_size": _inert_or(
        "error", "breaks whole groups per batch (TRL rejects it too)", False
    ),
    "lr_scheduler_kwargs": _inert_or(
        "error", "rlvr's schedulers take no kwargs (cosine_with_min_lr: min_lr_rate 0.1)", None, {}
    ),
    "optim_args": _inert_or("error", "rlvr's optimizers take no extra args", None, ""),
    "optim_target_modules": _inert_or(
        "error", "rlvr has no GaLore/APOLLO optimizers (model.lora trains adapters)", None
    ),
    "deepspeed": _inert_or(
        "error",
        "rlvr does not run DeepSpeed; training.parallelism: fsdp shards the policy",
        None,
        "",
        {},
    ),
    "parallelism_config": _inert_or(
        "error", "rlvr's parallelism is training.parallelism: ddp or fsdp", None
    ),
    "resume_from_checkpoint": _inert_or(
        "error", "resume with rlvr train --resume (output_dir's latest checkpoint)", None, False
    ),
    # ---- no effect in rlvr
    "bf16": _inert_or("ignored", "rlvr picks bf16 on CUDA automatically (model.dtype)"),
    "fp16": _inert_or("ignored", "rlvr picks the dtype automatically (model.dtype)", False),
    "tf32": _inert_or(
        "ignored",
        "rlvr trains in model.dtype (bfloat16 on CUDA), where TF32 does not apply; float32 "
        "matmuls keep torch's default",
        None,
    ),
    "disable_dropout": _inert_or(
        "ignored", "rlvr always disables dropout (policy, reference, value model)", True
    ),
    "cast_lm_head_to_fp32": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities in float32 chunks", False
    ),
    "remove_unused_columns": _inert_or("ignored", "rlvr passes every column to the rewards", False),
    "pad_to_multiple_of": _inert_or(
        "ignored", "rlvr pads each batch to its longest sequence", "auto", None
    ),
    "ds3_gather_for_generation": _inert_or("ignored", "DeepSpeed only", True),
    "cache_implementation": _inert_or(
        "ignored", "the hf backend uses generate()'s default cache", None
    ),
    "vllm_model_impl": _inert_or("ignored", "rlvr's vllm backend uses vLLM's own", "vllm"),
    "use_bias_correction_kl": _inert_or(
        "ignored",
        "rlvr's KL term is not weighted by the importance ratio (TRL's false): the KL "
        "gradient differs from TRL's default when beta > 0",
        False,
    ),
    "use_liger_kernel": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities with its own chunked kernel", False
    ),
    "liger_kernel_config": _inert_or("ignored", "as use_liger_kernel", None),
    "use_transformers_continuous_batching": _inert_or(
        "ignored",
        "the hf backend batches with generate(); backend.name: vllm for throughput",
        False,
    ),
    "use_transformers_paged": _inert_or(
        "ignored", "as use_transformers_continuous_batching", False
    ),
    "transformers_continuous_batching_config": _inert_or(
        "ignored", "as use_transformers_continuous_batching", None
    ),
    "run_name": _inert_or(
        "ignored",
        "rlvr names the wandb run after training.output_dir's folder: choose the name there",
        None,
    ),
    "project": _inert_or(
        "ignored", "the wandb project comes from WANDB_PROJECT (default rlvr)", "huggingface"
    ),
    "log_completions": _inert_or(
        "ignored", "rlvr writes samples to samples.jsonl every training.log_samples_steps", False
    ),
    "use_cpu": _inert_or(
        "ignored", "rlvr uses CUDA where it is; hide GPUs with CUDA_VISIBLE_DEVICES=", False
    ),
    "gradient_checkpointing_kwargs": _inert_or(
        "ignored", "rlvr checkpoints with its own settings", None
    ),
    "torch_empty_cache_steps": _inert_or("ignored", "rlvr manages the CUDA cache itself", None),
    "label_smoothing_factor": _inert_or("ignored", "not used by GRPO (TRL ignores it too)", 0.0),
    "average_tokens_across_devices": _inert_or(
        "ignored", "rlvr normalises the loss as algorithm.params.loss_type says", True
    ),
    "disable_tqdm": _inert_or(
        "ignored", "rlvr shows its progress bar only where stderr is a terminal", None
    ),
    "data_seed": _inert_or("ignored", "the prompt order derives from training.seed", None),
    "full_determinism": _inert_or(
        "ignored", "rlvr seeds every step's sampling from training.seed", False
    ),
    "ignore_data_skip": _inert_or(
        "ignored", "rlvr resumes mid-epoch at the next prompt, without skipping", False
    ),
    "train_sampling_strategy": _inert_or(
        "ignored", "GRPO samples with shuffle_dataset (TRL ignores this key too)", "random"
    ),
    "eval_delay": _inert_or("ignored", "rlvr evaluates at eval_on_start and every eval_steps", 0),
    "load_best_model_at_end": _inert_or(
        "ignored",
        "each eval is in metrics.jsonl: pick the checkpoint and load it (rlvr eval --checkpoint)",
        False,
    ),
    "save_only_model": _inert_or(
        "ignored", "rlvr saves the optimizer state too: --resume needs it", False
    ),
    "enable_jit_checkpoint": _inert_or(
        "ignored", "rlvr saves on Ctrl-C/SIGTERM and at training.max_minutes itself", False
    ),
    "restore_callback_states_from_checkpoint": _inert_or(
        "ignored", "rlvr has no trainer callbacks; --resume restores the whole run state", False
    ),
    "ddp_timeout": _inert_or("ignored", "set RLVR_DIST_TIMEOUT (seconds) instead", 1800),
    "fsdp_config": _inert_or(
        "ignored", "rlvr's FSDP2 shards per decoder layer, with training.fsdp_cpu_offload", None
    ),
    "local_rank": _inert_or("ignored", "set by torchrun", -1),
    **_group(
        "ignored",
        _HUB,
        push_to_hub=False,
        hub_always_push=False,
        hub_token=None,
        hub_private_repo=None,
        hub_model_id=None,
        hub_revision=None,
        hub_strategy="every_save",
        log_completions_hub_repo=None,
    ),
    **_group(
        "ignored",
        _EVAL,
        prediction_loss_only=False,
        eval_use_gather_object=False,
        batch_eval_metrics=False,
        bf16_full_eval=False,
        fp16_full_eval=False,
        eval_do_concat_batches=True,
        eval_accumulation_steps=None,
        metric_for_best_model=None,
        greater_is_better=None,
        include_for_metrics=[],
    ),
    **_group(
        "ignored",
        _LOADER,
        dataloader_drop_last=False,
        dataloader_persistent_workers=False,
        dataloader_pin_memory=True,
        dataloader_in_order=True,
        dataloader_num_workers=0,
        dataloader_prefetch_factor=None,
        dataloader_multiprocessing_context=None,
    ),
    **_group(
        "ignored",
        _DDP,
        ddp_find_unused_parameters=None,
        ddp_bucket_cap_mb=None,
        ddp_broadcast_buffers=None,
        ddp_static_graph=None,
        ddp_backend=None,
        accelerator_config=None,
    ),
    **_group(
        "ignored",
        _VLLM_SERVER,
        vllm_server_base_url=None,
        vllm_server_host="0.0.0.0",
        vllm_server_port=8000,
        vllm_server_timeout=240.0,
        vllm_group_port=51216,
    ),
    **_group(
        "ignored",
        _COMPILE,
        torch_compile=False,
        torch_compile_backend=None,
        torch_compile_mode=None,
    ),
    **_group(
        "ignored",
        "only with loss_type sapo or vespo, which rlvr does not have",
        sapo_temperature_neg=1.05,
        sapo_temperature_pos=1.0,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
    ),
    **_group(
        "ignored",
        "only with sync_ref_model, which rlvr does not have",
        ref_model_mixup_alpha=0.6,
        ref_model_sync_steps=512,
    ),
    **_group(
        "ignored",
        "only with use_adaptive_entropy, which rlvr does not have",
        entropy_coef_min=0.0,
        entropy_coef_max=1.0,
        entropy_coef_delta=0.005,
        entropy_target=0.2,
    ),
    **_group(
        "ignored",
        _LOG,
        logging_first_step=False,
        log_on_each_node=True,
        logging_nan_inf_filter=True,
        log_level="passive",
        log_level_replica="warning",
        include_num_input_tokens_seen="no",
        log_multimodal=True,
        num_completions_to_print=None,
        log_unique_prompts=False,
        skip_memory_metrics=True,
        debug="",
    ),
    **_group(
        "ignored",
        "rlvr's trackio logger takes its Space as callbacks: [{name: trackio, params: "
        "{space_id: ...}}] (report_to: trackio logs locally)",
        trackio_space_id=None,
        trackio_bucket_id=None,
        trackio_static_space_id=None,
    ),
    **_group(
        "ignored",
        "rewards read the dataset's columns by name; there are no labels",
        label_names=None,
        length_column_name="length",
    ),
    **_group("ignored", "rank 0 alone saves checkpoints", save_on_each_node=False),
    **_group(
        "ignored",
        "rlvr train and rlvr eval are separate commands",
        do_train=False,
        do_eval=False,
        do_predict=False,
    ),
    **_group(
        "ignored",
        "the training forward needs no KV cache; generation's is backend.params.use_cache (hf)",
        use_cache=False,
    ),
    # ---- keys of older TRL versions (OLDER_TRL_KEYS)
    "max_prompt_length": _mapped("same meaning (TRL before 1.0; rlvr left-truncates)"),
    "warmup_ratio": _mapped("same meaning (transformers before 5)"),
    "use_liger_loss": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities with its own chunked kernel", False
    ),
    "logging_dir": _inert_or("ignored", "logs go to training.output_dir", None),
    "overwrite_output_dir": _inert_or(
        "ignored", "rlvr never deletes a run; use a new output_dir", False
    ),
}

#: Keys of TRL versions before 1.16 (or of transformers before 5) that the table also decides.
OLDER_TRL_KEYS = frozenset(
    {"max_prompt_length", "warmup_ratio", "use_liger_loss", "logging_dir", "overwrite_output_dir"}
)

#: The ignored keys and why (kept for ``tests/test_training_keys.py`` and callers).
TRL_IGNORED = {k: e.reason for k, e in TRL_KEYS.items() if e.kind == "ignored" and e.apply is None}
#: The keys that are algorithm params in rlvr.
TRL_ALGORITHM_KEYS = tuple(
    k for k, e in TRL_KEYS.items() if e.target.startswith("algorithm.params.")
)


# --------------------------------------------------------------------------- translation


def trl_keys_markdown() -> str:
    """:data:`TRL_KEYS` as a markdown table (key, decision, rlvr, how or why), grouped by
    decision, for the docs."""
    order = {"mapped": 0, "moved": 1, "error": 2, "ignored": 3}
    lines = ["| GRPOConfig key | decision | rlvr | how or why |", "|---|---|---|---|"]
    for key, entry in sorted(TRL_KEYS.items(), key=lambda kv: (order[kv[1].kind], kv[0])):
        target = entry.target or (f"training.{key}" if entry.kind == "mapped" else "")
        why = entry.reason
        if entry.inert and entry.kind in ("ignored", "error"):
            shown = " or ".join("null" if v is None else json.dumps(v) for v in entry.inert)
            why += f" (accepted silently: {shown})"
        older = " (older TRL)" if key in OLDER_TRL_KEYS else ""
        cells = [f"`{key}`{older}", entry.kind, f"`{target}`" if target else "", why]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = [
    "OLDER_TRL_KEYS",
    "TRL_ALGORITHM_KEYS",
    "TRL_IGNORED",
    "TRL_KEYS",
    "TrlKey",
    "trl_keys_markdown",
]
