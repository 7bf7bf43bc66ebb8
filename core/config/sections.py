"""The core sections of a run config: ``model:`` (with LoRA), ``data:`` and ``training:``
(with off-policy guidance and the collapse guard), as static pydantic models."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    SkipValidation,
    field_validator,
    model_validator,
)

from rlvr.api.registration import Params
from rlvr.config.few_shot import FewShotExample


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoraConfig(Section):
    """LoRA adapters (peft) trained instead of the whole policy.

    Defaults follow the usual RL-with-LoRA recipe: rank 16 on every linear layer of the
    decoder (attention and MLP) learns about as well as full fine-tuning at a much higher
    learning rate, and ``alpha = 2 r`` keeps the update scale independent of the rank.
    """

    r: int = Field(16, ge=1, description="adapter rank")
    alpha: int = Field(32, ge=1, description="scaling: the update is (alpha / r) * B A")
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="dropout on the adapters' input; 0 keeps two passes of the same weights "
        "equal (the ratios of PPO-style losses assume so)",
    )
    target_modules: str | list[str] = Field(
        "all-linear",
        description="'all-linear' (every linear layer but the output head), or module names "
        "(e.g. [q_proj, k_proj, v_proj, o_proj])",
    )
    modules_to_save: list[str] | None = Field(
        None, description="modules trained in full beside the adapters (e.g. [lm_head])"
    )
    use_rslora: bool = Field(False, description="scale by alpha / sqrt(r) instead of alpha / r")
    layers_to_transform: list[int] | None = Field(
        None,
        description="adapt only these decoder layers (0-based; null: all). Adapting only the "
        "top layers also spares the backward pass through the layers below (faster on CPU)",
    )

    @field_validator("target_modules")
    @classmethod
    def _some_modules(cls, value: str | list[str]) -> str | list[str]:
        if not value:
            raise ValueError("no modules named; use 'all-linear' or name some (e.g. [q_proj])")
        return value

    @model_validator(mode="after")
    def _layers_need_names(self) -> LoraConfig:
        if self.layers_to_transform is not None:
            if isinstance(self.target_modules, str):
                raise ValueError(
                    "layers_to_transform needs target_modules as a list of module names "
                    "(e.g. [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]), "
                    "not 'all-linear'"
                )
            if not self.layers_to_transform or min(self.layers_to_transform) < 0:
                raise ValueError("layers_to_transform: a non-empty list of layer indices >= 0")
        return self


class ModelConfig(Section):
    """Which policy to train."""

    name_or_path: str = Field(description="hub id, local directory, or a .gguf file")
    gguf_file: str | None = Field(None, description="GGUF file inside name_or_path, if any")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="auto: bfloat16 on CUDA and on a CPU with AVX512-BF16 or AMX, else float32",
    )
    trust_remote_code: bool = Field(
        False, description="run the model's own code from the hub (transformers' flag); off"
    )
    revision: str | None = Field(None, description="hub branch, tag or commit of the model")
    attn_implementation: str | None = Field(
        None, description="transformers' attention kernel (sdpa, eager, ...); null: its default"
    )
    lora: LoraConfig | None = Field(
        None, description="train LoRA adapters instead of every weight (absent: full fine-tuning)"
    )


class ReasoningGymConfig(Section):
    """A reasoning-gym task as the data source (:mod:`rlvr.data.reasoning_gym`).

    One seeded stream of the task's generator is split by a hash of each normalised question:
    a question is held out for evaluation iff its hash falls in ``eval_share``, so the
    training rows and the eval rows are disjoint by construction, whatever the seeds.
    """

    task: str = Field(min_length=1, description="reasoning-gym task name, e.g. products, chain_sum")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the task's generator knobs (its config dataclass fields, e.g. "
        "{min_terms: 2, max_digits: 2}); seed and size are set by rlvr",
    )
    seed: int = Field(0, description="seed of the generator stream (train and eval alike)")
    train_size: int = Field(
        10_000,
        ge=1,
        description="training rows: the first N draws outside the eval share (repeats "
        "kept, as the generator draws them); an epoch is N prompts",
    )
    eval_size: int = Field(
        500, ge=1, description="held-out problems: the first N distinct questions in the eval share"
    )
    eval_share: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="share of the question space (by hash) held out for evaluation",
    )
    template: str = Field(
        "{question}",
        description="the prompt made of a question: a string with a {question} placeholder "
        "(instructions, a worked example)",
    )

    @field_validator("params")
    @classmethod
    def _no_seed_or_size(cls, value: dict[str, Any]) -> dict[str, Any]:
        taken = sorted({"seed", "size"} & set(value))
        if taken:
            raise ValueError(
                f"{' and '.join(taken)} {'is' if len(taken) == 1 else 'are'} set by rlvr "
                "(data.reasoning_gym.seed, train_size and eval_size), not a generator knob"
            )
        return value

    @field_validator("template")
    @classmethod
    def _has_question(cls, value: str) -> str:
        try:
            value.format(question="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"the template must hold only the {{question}} placeholder (write a literal "
                f"brace as {{{{ or }}}}): {type(exc).__name__}: {exc}"
            ) from None
        if "{question}" not in value:
            raise ValueError("the template must contain the {question} placeholder")
        return value


#: A plugin's params: validated on their own against the plugin's model (see
#: :mod:`rlvr.config.plugin_params`), then stored as that model's instance, and dumped with all
#: its fields.
PluginParams = SerializeAsAny[SkipValidation[Params]]

#: The ``data:`` keys that are shorthands of a data source: ``path: X`` is ``source: file,
#: params: {path: X}``; ``reasoning_gym: {...}`` is ``source: reasoning_gym, params: {...}``.
DATA_SHORTHANDS = {"path": "file", "reasoning_gym": "reasoning_gym"}


class DataConfig(Section):
    """Where prompts come from; every field of a row reaches the rewards."""

    source: str | None = Field(
        None,
        description="the data source plugin that makes the rows (rlvr plugins lists them: "
        "file, datasets, reasoning_gym, and any installed); data.path and data.reasoning_gym "
        "are its shorthands",
    )
    params: PluginParams = Field(default_factory=Params, description="the data source's own params")
    path: str | None = Field(
        None,
        description="a .json/.jsonl/.parquet file or directory, or a hub dataset (shorthand of "
        "source: file); required, unless the rows are given in Python "
        "(rlvr.Trainer(dataset=...)) or come from another source",
    )
    reasoning_gym: ReasoningGymConfig | None = Field(
        None,
        description="generate the training and eval rows from a reasoning-gym task (shorthand "
        "of source: reasoning_gym; needs rlvr[reasoning-gym]); splits: train and test",
    )
    split: str = Field(
        "train", description="split of a hub dataset or directory (a single file has none)"
    )
    prompt_field: str = Field("prompt", description="the row field that holds the prompt")
    system_prompt: str | None = Field(None, description="system message before every prompt")
    few_shot: list[FewShotExample] = Field(
        default_factory=list,
        description="worked examples shown before every prompt, after the system message: "
        "{user, assistant}, or {messages: [...]} (an exchange with tool calls); as turns "
        "through the chat template, else as text",
    )
    chat_template: bool | None = Field(
        None,
        description="send the prompts through the tokenizer's chat template. null: when it has "
        "one, plain-string prompts included (with a warning: TRL sends those as plain text); "
        "a list of messages always goes through the template",
    )
    eval_path: str | None = Field(None, description="eval data (default: same path)")
    eval_split: str | None = Field("test", description="split that evaluation reads")
    max_samples: int | None = Field(None, ge=1, description="use only the first N rows")
    shuffle: bool = Field(True, description="draw prompts in a seeded random order each epoch")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="extra keyword arguments of the tokenizer's apply_chat_template (e.g. "
        "{enable_thinking: false}); TRL's chat_template_kwargs",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        shorthand = [k for k in DATA_SHORTHANDS if getattr(self, k) is not None]
        if self.source is not None and shorthand:
            key = shorthand[0]
            raise ValueError(
                f"data.{key} is the shorthand of source: {DATA_SHORTHANDS[key]}; give one "
                f"spelling: remove data.{key}, or data.source and data.params"
            )
        if self.source is not None and self.eval_path is not None and self.source != "file":
            raise ValueError(
                f"data source {self.source!r} makes its eval rows as split data.eval_split; "
                "remove data.eval_path (it names an eval file for data.path)"
            )
        if self.reasoning_gym is not None:
            given = [k for k in ("path", "eval_path") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"data.reasoning_gym generates the rows: unset data.{' and data.'.join(given)}"
                    " (or drop data.reasoning_gym to read files)"
                )
        return self


def data_source_entry(data: DataConfig) -> tuple[str | None, Any, str]:
    """``(source name, params, config path of the params)`` of ``data``: ``data.source`` and
    its params, or what a shorthand stands for (``data.path``: ``file``, ``data.reasoning_gym``:
    ``reasoning_gym``); the name is None when the rows come from memory."""
    if data.source is not None:
        return data.source, data.params, "data.params"
    if data.path is not None:
        return DATA_SHORTHANDS["path"], {"path": data.path}, "data.path"
    if data.reasoning_gym is not None:
        return (
            DATA_SHORTHANDS["reasoning_gym"],
            data.reasoning_gym.model_dump(),
            "data.reasoning_gym",
        )
    return None, None, "data.path"


class GuidanceConfig(Section):
    """Off-policy guidance: each group has one completion that is the row's own solution.

    For a model whose samples are rarely right, so that most groups hold no correct
    completion to prefer (see :mod:`rlvr.rollout.guidance`).
    """

    field: str = Field(description="the row field holding a worked solution, e.g. GSM8K's `answer`")
    remove: str | None = Field(
        None,
        description="a regex whose matches are removed from the solution first, e.g. "
        "'<<[^>]*>>' for GSM8K's calculator annotations",
    )

    @field_validator("remove")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class CollapseConfig(Section):
    """The collapse guard (:mod:`rlvr.training.collapse`): when a run is destroying the policy.

    Each step compares the run with its start: the first ``window`` steps' mean training
    reward and entropy, and the first in-training eval."""

    action: Literal["warn", "stop", "off"] = Field(
        "warn",
        description="warn: say so on the console and in run_summary.txt's first lines; stop: "
        "also save a checkpoint and stop the run (rlvr train exits 1); off: no checks",
    )
    window: int = Field(
        5,
        ge=1,
        description="steps averaged on each side of the comparison (the first N, the last N)",
    )
    reward_drop: float = Field(
        0.7,
        gt=0,
        le=1,
        description="trip when the last window's mean training reward is below (1 - this) of "
        "the first window's",
    )
    eval_drop: float = Field(
        0.5,
        gt=0,
        le=1,
        description="trip when an in-training eval's accuracy is below (1 - this) of the first "
        "eval's",
    )
    no_spread: float = Field(
        0.95,
        gt=0,
        le=1,
        description="trip when at least this share of the groups had no spread on every step of "
        "the last window while the reward was below the first window's",
    )
    entropy_drop: float = Field(
        0.9,
        gt=0,
        le=1,
        description="trip when the last window's mean entropy is below (1 - this) of the first "
        "window's while the reward did not rise",
    )


class TrainingConfig(Section):
    """Optimisation and sampling settings, named as in TRL's GRPOConfig.

    Deliberate differences: ``per_device_train_batch_size`` counts *prompts*, each sampled
    ``num_generations`` times (in TRL it counts completions); ``max_steps``, ``warmup_steps``,
    ``save_steps``, ``eval_steps``, ``logging_steps`` and ``log_samples_steps`` count *steps*
    (one generation round and its ``num_iterations`` optimizer updates, one line of
    ``metrics.jsonl``; TRL counts optimizer updates). A GRPOConfig pasted under a top-level
    ``trl:`` section keeps TRL's meaning (:mod:`rlvr.compat.trl.translate`).
    """

    output_dir: str = Field("outputs/run", min_length=1, description="where the run writes")
    seed: int = Field(42, description="seeds everything; the RNGs are reseeded every step")
    learning_rate: float = Field(1e-6, gt=0, description="peak learning rate of the policy")
    adam_beta1: float = Field(0.9, description="AdamW's beta1")
    adam_beta2: float = Field(0.999, description="AdamW's beta2")
    adam_epsilon: float = Field(1e-8, description="AdamW's epsilon")
    weight_decay: float = Field(
        0.0, description="AdamW weight decay (matrices only, not biases or norms)"
    )
    optim: Literal["adamw_torch", "adamw_torch_fused", "adamw", "sgd"] = Field(
        "adamw_torch", description="optimizer; AdamW runs fused on CUDA, and with adamw_torch_fused"
    )
    lr_scheduler_type: Literal[
        "linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr"
    ] = Field(
        "linear",
        description="learning-rate schedule after the warm-up (transformers'), ending with the "
        "step max_steps; it advances at each optimizer update (num_iterations per step)",
    )
    warmup_ratio: float = Field(
        0.0,
        ge=0,
        le=1,
        description="warm-up as a share of the run's steps (when warmup_steps is 0)",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        description="linear warm-up, in steps as max_steps counts them (the learning rate "
        "reaches learning_rate after the step warmup_steps, whatever num_iterations)",
    )
    max_grad_norm: float = Field(1.0, description="gradient norm clipping")
    per_device_train_batch_size: int = Field(
        8,
        ge=1,
        description="prompts per micro-batch and rank (TRL counts completions); each is sampled "
        "num_generations times",
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="micro-batches per optimizer step"
    )
    num_generations: int = Field(8, ge=1, description="completions sampled per prompt")
    max_prompt_length: int | None = Field(
        512, ge=1, description="longer prompts are cut from the left (null: never)"
    )
    max_completion_length: int = Field(
        256, ge=1, description="tokens per completion; longer ones are cut (truncated)"
    )
    max_steps: int = Field(
        -1,
        description="steps to train (>= 1); -1 = num_train_epochs. A step is one generation "
        "round and algorithm.params.num_iterations optimizer updates on it, one line of "
        "metrics.jsonl (TRL counts each update); warmup_steps, save_steps, eval_steps, "
        "logging_steps and log_samples_steps count the same steps",
    )
    max_minutes: float | None = Field(
        None,
        gt=0,
        description="wall-time budget of this process (model loading included): no step starts "
        "that would end past it, judged by the longest step so far; the run saves and stops "
        "(--resume continues it). null: no limit",
    )
    num_train_epochs: float = Field(
        1.0, gt=0, description="passes over the prompts, when max_steps is -1"
    )
    temperature: float = Field(1.0, ge=0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    top_k: int | None = Field(None, ge=0, description="sample from the k likeliest tokens")
    min_p: float | None = Field(None, ge=0, le=1, description="min-p sampling")
    repetition_penalty: float = Field(1.0, gt=0, description="sampling repetition penalty")
    logging_steps: int = Field(
        1, ge=1, description="print a step line every N steps (metrics.jsonl has every step)"
    )
    save_steps: int = Field(
        500, ge=1, description="write a checkpoint every N steps (and at the last step)"
    )
    save_total_limit: int | None = Field(
        None, ge=1, description="keep only the last N checkpoints (null: all)"
    )
    report_to: list[str] | str = Field(
        "none",
        description="loggers the metrics also go to: none, tensorboard, wandb, trackio, mlflow "
        "(or any logger callback a plugin registers), all (every installed one), or a list; "
        "metrics.jsonl is always written. Each is a callback plugin (see callbacks)",
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, more time"
    )
    profile_phases: bool = Field(
        False,
        description="log the CPU seconds of each phase of a step (profile/generation, "
        "profile/no_grad, profile/forward, profile/backward, profile/optimizer in "
        "metrics.jsonl): where a slow step's time goes",
    )
    pack_prompts: bool = Field(
        True,
        description="the training passes compute a group's prompt once, its completions packed "
        "behind it (where the model's attention takes a custom mask and it is less work); "
        "false: one row per completion, prompt included (the layout TRL computes; on a GPU the "
        "packed rows' dense masked attention may cost more than it saves)",
    )
    parallelism: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="with several ranks (torchrun): ddp replicates the policy, fsdp shards it "
        "per decoder layer (FSDP2)",
    )
    fsdp_cpu_offload: bool = Field(
        False, description="fsdp: keep sharded parameters and optimizer state in CPU memory"
    )
    log_samples_steps: int = Field(10, ge=1, description="write sample completions every N steps")
    reward_workers: int = Field(2, ge=0, description="reward worker processes (0: in-process)")
    max_bad_steps: int = Field(3, ge=1, description="stop after this many non-finite losses")
    max_reward_error_frac: float = Field(
        0.5,
        ge=0,
        le=1,
        description="stop (with a checkpoint) when more than this fraction of one reward's "
        "calls in a step fail or time out; 1 never stops",
    )
    max_failed_episode_frac: float = Field(
        0.5,
        ge=0,
        le=1,
        description="multi-turn environments: stop the run when more than this fraction of "
        "a step's episodes fail (the environment raised, timed out or returned something "
        "malformed; with dynamic sampling, of one generation round's), before it trains on "
        "the step: one error line names the first failure, the run exits non-zero, and the "
        "checkpoint of the last finished step is kept (saved if it was not). The in-training "
        "eval follows the same rule once its line is written; 1 never stops "
        "(a step whose every episode failed then trains on nothing and logs no reward)",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="asynchronous rollouts: generate the next steps' samples while this step "
        "trains, from weights at most this many updates old (0: each step samples from the "
        "weights it trains, as TRL does); needs the algorithm's importance_sampling_correction",
    )
    eval_steps: int | None = Field(
        None,
        ge=1,
        description="evaluate on the eval split every N steps and at the last step (null: never)",
    )
    eval_on_start: bool = Field(True, description="with eval_steps: also evaluate at step 0")
    keep_best: bool = Field(
        False,
        description="with eval_steps: also keep the checkpoint of the best in-training eval "
        "(pass@1, else the mean reward) out of save_total_limit's pruning, recorded in "
        "best_checkpoint.json; rlvr eval --checkpoint OUTPUT_DIR evaluates it",
    )
    collapse: CollapseConfig = Field(
        default_factory=CollapseConfig,
        description="the collapse guard: warn (or stop) when the training reward, the "
        "in-training eval, the groups' spread or the entropy fall far below the run's start",
    )

    eval_limit: int | None = Field(
        200, ge=1, description="with eval_steps: the first N eval prompts (null: all)"
    )
    eval_sampling: Literal["greedy", "train"] = Field(
        "greedy",
        description="with eval_steps: greedy (one completion per prompt) or the training "
        "temperature/top_p/top_k/min_p with eval_num_generations completions per prompt",
    )
    eval_num_generations: int = Field(
        1, ge=1, description="with eval_sampling: train: completions per prompt (pass@k)"
    )
    eval_batch_size: int | None = Field(
        None,
        ge=1,
        description="completions per generation call when evaluating (rlvr eval and "
        "eval_steps); null: a training step's worth, or at least 256 with a backend that "
        "schedules its own batches (vllm)",
    )
    guidance: GuidanceConfig | None = Field(
        None,
        description="one completion of each group is the row's own solution, the other "
        "num_generations - 1 are sampled (null: all sampled)",
    )

    @field_validator("learning_rate")
    @classmethod
    def _finite_lr(cls, value: float) -> float:
        if not math.isfinite(value):  # .nan is already "not > 0"
            raise ValueError(
                f"{value!r} is not a learning rate: it must be a finite number (e.g. 1e-6 for "
                "a 1B model, 1e-3 for the quickstart's tiny one)"
            )
        return value

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, value: int) -> int:
        # TRL reads any value below 1 as "use num_train_epochs"; 0 more likely means a mistake.
        if value == 0 or value < -1:
            raise ValueError(
                f"{value} is no step count; give the number of steps (>= 1), or -1 to "
                "train for num_train_epochs"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        if self.eval_sampling == "greedy" and self.eval_num_generations > 1:
            raise ValueError(
                f"eval_num_generations: {self.eval_num_generations} with eval_sampling: greedy "
                "repeats one completion; set eval_sampling: train to sample several, or "
                "eval_num_generations: 1"
            )
        if self.guidance is not None and self.num_generations < 2:
            raise ValueError(
                "guidance replaces one of num_generations completions per prompt by the "
                "row's solution, so it needs num_generations >= 2 (one sampled at least)"
            )
        if self.keep_best and self.eval_steps is None:
            raise ValueError(
                "keep_best keeps the checkpoint of the best in-training eval, so it needs "
                "eval_steps (e.g. eval_steps: 25)"
            )
        return self
