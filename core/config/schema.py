"""The run config: one YAML (or TOML) file, validated as a whole before anything loads.

The core sections are a static, typed model (:class:`RunConfig`); each plugin entry's
``params`` is validated on its own against that plugin's params model, so one entry's failure
never hides another's and every problem carries its own path (``rewards[1].params.tolerance``).
All problems are reported at once.

Relative paths (``model.name_or_path``, ``data.path``, ``data.eval_path``,
``training.output_dir``, and those in plugin params, such as ``callable``'s ``function``)
written in a config file resolve against that file's directory; paths given with ``--set``
against the current directory (param by param: a ``--set`` on one param of an entry leaves the
others where the file put them).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import math
import os
import re
import tomllib
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    SkipValidation,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import Host
from rlvr.api.registration import REWARD_LIMIT, Params, Requirements
from rlvr.compat.trl.translate import TRL_KEYS, move_trl_keys
from rlvr.config.problems import key_path, pydantic_problems, sort_problems, with_origins
from rlvr.config.yaml_text import YamlTextError, load_yaml

SECTIONS = (
    "model",
    "data",
    "rewards",
    "algorithm",
    "backend",
    "environment",
    "training",
    "callbacks",
)
DEFAULT_ALGORITHM = "grpo"
DEFAULT_BACKEND = "hf"
DEFAULT_ENVIRONMENT = "single_turn"


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


class FewShotExample(Section):
    """One worked exchange shown before every prompt: a question and the answer to imitate."""

    user: str = Field(description="the example question, as a user turn")
    assistant: str = Field(description="its answer, in the form the rewards check")


class DataConfig(Section):
    """Where prompts come from; every field of a row reaches the rewards."""

    path: str | None = Field(
        None,
        description="a .json/.jsonl/.parquet file or directory, or a hub dataset; required, "
        "unless the rows are given in Python (rlvr.Trainer(dataset=...)) or come from "
        "reasoning_gym",
    )
    reasoning_gym: ReasoningGymConfig | None = Field(
        None,
        description="generate the training and eval rows from a reasoning-gym task instead of "
        "path (needs rlvr[reasoning-gym]); splits: train and test",
    )
    split: str = Field(
        "train", description="split of a hub dataset or directory (a single file has none)"
    )
    prompt_field: str = Field("prompt", description="the row field that holds the prompt")
    system_prompt: str | None = Field(None, description="system message before every prompt")
    few_shot: list[FewShotExample] = Field(
        default_factory=list,
        description="worked examples shown before every prompt, after the system message: as "
        "user/assistant turns through the chat template, else as text",
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
        if self.reasoning_gym is not None:
            given = [k for k in ("path", "eval_path") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"data.reasoning_gym generates the rows: unset data.{' and data.'.join(given)}"
                    " (or drop data.reasoning_gym to read files)"
                )
        return self


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
        "checkpoint of the last finished step is kept (saved if it was not); 1 never stops "
        "(a step whose every episode failed then trains on nothing and logs no reward)",
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


#: A plugin's params: validated on their own against the plugin's model (see :func:`validate`),
#: then stored as that model's instance, and dumped with all its fields.
PluginParams = SerializeAsAny[SkipValidation[Params]]


class PluginEntry(Section):
    """An ``algorithm:`` or ``backend:`` entry: a plugin name and that plugin's params."""

    name: str = Field(description="the plugin's registered name (rlvr plugins lists them)")
    params: PluginParams = Field(
        default_factory=Params,
        description="the plugin's own params, validated against its params model",
    )


class RewardEntry(PluginEntry):
    """One ``rewards[]`` entry: the reward plugin, its params, and how it counts."""

    label: str | None = Field(None, description="name in logs (default: the reward's name)")
    weight: float = Field(1.0, description="weight in the summed reward")
    timeout: float = Field(
        10.0,
        gt=0,
        description="seconds per call before the fallback (a batched reward's one call on "
        "its whole batch included)",
    )
    fallback: float = Field(0.0, description="value of a call that times out or crashes")
    on_error: Literal["fallback", "raise"] = Field(
        "fallback", description="a call that raises: use the fallback, or stop the run"
    )
    scope: Literal["answer", "transcript"] | None = Field(
        None,
        description="what it scores of a multi-turn episode: answer (the last assistant "
        "message) or transcript (every turn, sampled and environment's); null: the reward's "
        "own default (answer for the built-in rewards)",
    )
    correctness: bool = Field(
        False,
        description="this reward decides whether a completion is correct when evaluating "
        "(accuracy, pass@k); at most one entry. Unmarked: the first reward whose plugin checks "
        "answers (answer, numbers), see rlvr.evaluation.correctness",
    )

    @field_validator("weight", "fallback")
    @classmethod
    def _sane(cls, value: float, info: ValidationInfo) -> float:
        # Every step sums weight x value over the rewards: a NaN there (or an overflow to inf)
        # makes every advantage NaN, so the run could only skip steps until max_bad_steps.
        if not math.isfinite(value) or abs(value) > REWARD_LIMIT:
            raise ValueError(
                f"{value!r} is not a usable {info.field_name}: it must be a finite number "
                f"between -{REWARD_LIMIT:g} and {REWARD_LIMIT:g} (rewards score about -1..1, "
                "so weights and fallbacks are small numbers too)"
            )
        return value

    @property
    def key(self) -> str:
        return self.label or self.name


class EnvironmentEntry(PluginEntry):
    """The ``environment:`` entry: the environment plugin, its params, and the limits rlvr
    puts on its episodes (the same for every environment, so they are not its params)."""

    max_turns: int = Field(4, ge=1, description="most assistant turns in one episode")
    max_episode_tokens: int | None = Field(
        None,
        ge=1,
        description="most completion tokens of an episode, sampled and environment's together "
        "(null: max_turns x training.max_completion_length); an episode past it is truncated",
    )
    turn_timeout: float = Field(
        30.0, gt=0, description="seconds one environment call may take before its episode fails"
    )
    episode_timeout: float = Field(
        300.0, gt=0, description="seconds of environment calls one episode may take in all"
    )
    tool_call_format: Literal["auto", "hermes", "none"] = Field(
        "auto",
        description="how tool calls are read from the model's text: hermes (<tool_call>{json}"
        "</tool_call>, Qwen/Hermes), none, or auto (hermes when the chat template writes "
        "<tool_call>)",
    )
    reward_weights: dict[str, float] = Field(
        default_factory=dict,
        description="weight of each named reward the environment returns, in the episode's "
        "score (a name not listed: 1.0; 0: logged only); each is logged as rewards/<name>",
    )

    @field_validator("reward_weights")
    @classmethod
    def _sane_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not math.isfinite(weight) or abs(weight) > REWARD_LIMIT:
                raise ValueError(
                    f"{weight!r} is not a usable weight for {name!r}: it must be a finite "
                    f"number between -{REWARD_LIMIT:g} and {REWARD_LIMIT:g}"
                )
        return value


class RunConfig(Section):
    """A whole run config. Sections a command does not need may be absent (None)."""

    model: ModelConfig | None = Field(None, description="the policy to train or evaluate")
    data: DataConfig | None = Field(None, description="the prompts and the fields rewards read")
    rewards: list[RewardEntry] = Field(
        default_factory=list, description="reward plugins, summed with their weights"
    )
    algorithm: PluginEntry | None = Field(
        None, description="the algorithm plugin (train and validate default to grpo)"
    )
    backend: PluginEntry | None = Field(
        None, description="the generation backend plugin (train and validate default to hf)"
    )
    environment: EnvironmentEntry | None = Field(
        None,
        description="the environment plugin episodes run in (train and validate default to "
        "single_turn: one completion per prompt)",
    )
    training: TrainingConfig = Field(
        default_factory=TrainingConfig, description="optimisation, sampling, logging, faults"
    )
    callbacks: list[PluginEntry] = Field(
        default_factory=list,
        description="callback plugins that observe the run (and may stop it), in order: "
        "entries {name, params}, or just the name (rlvr plugins lists them)",
    )


class ConfigError(RlvrError):
    """A config with problems; ``problems`` lists ``(path, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        self.source = source
        super().__init__(self.format())

    def format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        n = len(self.problems)
        lines = [f"{head}{n} problem{'s' if n != 1 else ''} in the config:"]
        lines += [f"  {path or '(top level)'}: {msg}" for path, msg in self.problems]
        return "\n".join(lines)


# --------------------------------------------------------------------------- JSON schema


def _entry_model(kind: str, record: Any, base: type[BaseModel]) -> type[BaseModel]:
    return create_model(
        f"{kind.title()}_{record.name}",
        __base__=base,
        __doc__=record.description,
        name=(Literal[record.name], ...),  # type: ignore[arg-type]  # a Literal built at runtime
        params=(record.params, Field(default_factory=record.params)),
    )


def _union(kind: str, host: Host, base: type[BaseModel]) -> Any:
    models = [_entry_model(kind, r, base) for r in host.records[kind].values()]
    if not models:
        return base
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007


def json_schema(host: Host) -> dict[str, Any]:
    """The JSON Schema of a run config for the plugins ``host`` has loaded (for editors):
    :class:`RunConfig` with each plugin entry a union discriminated on ``name``."""
    # Types built at runtime: mypy cannot check them as annotations.
    reward: Any = _union("reward", host, RewardEntry)
    algorithm: Any = _union("algorithm", host, PluginEntry)
    backend: Any = _union("backend", host, PluginEntry)
    environment: Any = _union("environment", host, EnvironmentEntry)
    callback: Any = _union("callback", host, PluginEntry)
    model = create_model(
        "RunConfig",
        __base__=RunConfig,
        rewards=(list[reward], Field(default_factory=list)),
        callbacks=(list[callback], Field(default_factory=list)),
        algorithm=(algorithm | None, None),
        backend=(backend | None, None),
        environment=(environment | None, None),
    )
    return model.model_json_schema()


# --------------------------------------------------------------------------- loading


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or TOML config file into a dict (a clear error if it is not one)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([("", f"config file {str(p.absolute())!r} does not exist")])
    text = p.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else load_yaml(text)
    except (YamlTextError, tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: a huge int
        msg = str(exc).replace('"<unicode string>"', p.name)  # yaml names no file of its own
        raise ConfigError([("", f"cannot parse {p.name}: {msg}")], source=str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("", "the top level must be a mapping of sections")], source=str(p))
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (values parsed as YAML; ``rewards[1].weight``
    and ``rewards.1.weight`` both address a list item)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError([("--set", f"{item!r} is not KEY=VALUE (e.g. training.seed=1)")])
        key, raw = item.split("=", 1)
        parts = key.replace("[", ".").replace("]", "").strip(".").split(".")
        try:
            value = _parse_value(raw)
        except YamlTextError as exc:  # the first line: the rest points into the value
            shown = repr(raw) if len(raw) <= 60 else f"{raw[:40]!r}... ({len(raw):,} characters)"
            why = str(exc).splitlines()[0]
            raise ConfigError(
                [(key, f"cannot read the value {shown} (from --set): {why}")]
            ) from None
        node: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or len(part) > 9 or int(part) >= len(node):
                    raise ConfigError(
                        [(key, f"no list item {part!r} (the list has {len(node)}) (from --set)")]
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
                    if node is None:
                        node = data_set(data, parts[: i + 1], {})
            else:
                raise ConfigError(
                    [(key, f"{'.'.join(parts[:i])} is not a section or list (from --set)")]
                )
    return data


def _parse_value(raw: str) -> Any:
    """A ``--set`` value as YAML, plus what YAML 1.1 misses: ``1e-3`` is a float. A quoted
    value (``'x="1e3"'``) is a string, as in the file."""
    value = load_yaml(raw) if raw.strip() else ""
    if isinstance(value, str) and _plain_scalar(raw):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _plain_scalar(raw: str) -> bool:
    """Whether ``raw`` is YAML written without quotes (or a block scalar's ``|``, ``>``)."""
    node = yaml.compose(raw, Loader=yaml.SafeLoader)
    return isinstance(node, yaml.ScalarNode) and node.style is None


def data_set(data: dict[str, Any], parts: list[str], value: Any) -> Any:
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[parts[-1]] = value
    return value


# --------------------------------------------------------------------------- relative paths

_DATA_SUFFIXES = (".json", ".jsonl", ".parquet")


def _looks_local(value: str) -> bool:
    """A path rather than a hub id (``org/name``): starts with ``.``, ``/`` or ``~``, has more
    than one ``/``, or names a file by its suffix."""
    return (
        value.startswith((".", "/", "~"))
        or value.count("/") > 1
        or "\\" in value
        or value.endswith((".gguf", *_DATA_SUFFIXES))
    )


#: The config keys that hold paths, and whether a value may instead be a hub id.
PATH_KEYS = {
    ("model", "name_or_path"): True,
    ("data", "path"): True,
    ("data", "eval_path"): True,
    ("training", "output_dir"): False,
}


def resolve_paths(data: dict[str, Any], base: Path, only: Sequence[str] | None = None) -> None:
    """Make the relative paths of :data:`PATH_KEYS` absolute against ``base`` (in place).

    A value that may be a hub id stays as written unless it exists under ``base``, looks like
    a path (:func:`_looks_local`), or names an entry of a directory that exists under ``base``
    (``models/tiny-arithm`` beside a ``models/`` directory: a typo, not a hub id to wait on).
    ``only`` limits this to those dotted keys."""
    for (section, key), hub in PATH_KEYS.items():
        if only is not None and f"{section}.{key}" not in only:
            continue
        node = data.get(section)
        if not isinstance(node, dict):
            continue
        value = node.get(key)
        if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
            continue
        candidate = base / value
        in_local_dir = "/" in value and candidate.parent.is_dir()
        if not hub or candidate.exists() or _looks_local(value) or in_local_dir:
            node[key] = os.path.normpath(candidate.absolute())


# --------------------------------------------------------------------------- validation


def load_config(
    source: str | Path | dict[str, Any],
    host: Host,
    *,
    overrides: Sequence[str] = (),
    require: tuple[str, ...] = (),
    training: bool = True,
    allow_code: bool = False,
    trust_remote_code: bool = False,
    amend: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> RunConfig:
    """Read, override, validate and cross-check a config; raise :class:`ConfigError` with all
    problems. ``require`` names the sections the calling command needs; ``training=False``
    (evaluation, scoring, export) drops the warnings about settings that cannot learn: a greedy
    eval is what ``training.temperature: 0`` is for there. A config that would run code in
    those sections needs the user's opt-in (:func:`check_code_opt_ins`): ``allow_code`` for
    rewards that import code it names, ``trust_remote_code`` for ``model.trust_remote_code``.
    ``amend`` returns the config dict with what the caller adds (``rlvr.Trainer``: its reward
    functions), which the overrides can then address.

    Relative paths in a file resolve against its directory, those given in ``overrides``
    against the current directory (a dict ``source`` is taken as written)."""
    label = None if isinstance(source, dict) else str(source)
    data = dict(source) if isinstance(source, dict) else read_file(source)
    if label is not None:
        resolve_paths(data, Path(label).absolute().parent)
    if amend is not None:
        data = amend(data)
    data = apply_overrides(data, list(overrides))
    set_keys = {key_path(o.split("=", 1)[0]): o for o in overrides if "=" in o}
    if label is not None:
        resolve_paths(data, Path.cwd(), only=list(set_keys))
    keys = [key_path(o.split("=", 1)[0]) for o in overrides if "=" in o]
    config_dir = Path(label).absolute().parent if label is not None else None
    try:
        config = validate(
            data, host, require=require, config_dir=config_dir, set_keys=keys, training=training
        )
    except ConfigError as exc:
        raise ConfigError(with_origins(exc.problems, overrides), source=label) from None
    check_code_opt_ins(
        config,
        host,
        require or ("model", "rewards"),  # a caller that names no sections may use any
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    return config


#: The command-line flags that let a config run code (``allow_code=`` and
#: ``trust_remote_code=`` in Python).
ALLOW_CODE_FLAG = "--allow-code"
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"


class CodeOptInError(RlvrError):
    """A config asks to run code that the command line did not allow."""


def check_code_opt_ins(
    config: RunConfig,
    host: Host,
    sections: Sequence[str],
    *,
    allow_code: bool,
    trust_remote_code: bool,
) -> None:
    """Raise :class:`CodeOptInError` when ``config`` (in the ``sections`` a command uses) would
    run code that was not allowed: a reward entry whose record says it imports code named in
    its params (``callable``), or an environment entry whose record says so (a user's class
    given to an adapter, a function as a tool) where the command runs episodes, without
    ``allow_code``; ``model.trust_remote_code: true`` (the model directory's Python files),
    or a reward whose record says it runs a model's own
    files (``reward_model``'s ``trust_remote_code``), without ``trust_remote_code``. A config
    may come from anyone; only the person running the command can say that its code may run."""
    found = []
    if "rewards" in sections and not allow_code:
        for i, entry in enumerate(config.rewards):
            record = host.rewards.get(entry.name)
            code = record.runs_code(entry.params) if record is not None else None
            if code:
                label = f" {entry.label!r}" if entry.label else ""
                found.append(
                    f"rewards[{i}] ({entry.name}{label}) imports and runs {code!r}: pass "
                    f"{ALLOW_CODE_FLAG} to allow it (allow_code=True in Python)"
                )
    env = config.environment
    # The commands that run episodes: train and validate (algorithm), eval (data), env check
    # (environment); scoring and export build no environment.
    episodes = any(s in sections for s in ("algorithm", "data", "environment"))
    if episodes and env is not None and not allow_code:
        env_record = host.environments.get(env.name)
        code = env_record.runs_code(env.params) if env_record is not None else None
        if code:
            found.append(
                f"environment ({env.name}) imports and runs {code!r}: pass {ALLOW_CODE_FLAG} "
                "to allow it (allow_code=True in Python)"
            )
    if "rewards" in sections and not trust_remote_code:
        for i, entry in enumerate(config.rewards):
            record = host.rewards.get(entry.name)
            remote = record.remote_code(entry.params) if record is not None else None
            if remote:
                found.append(
                    f"rewards[{i}] ({entry.name}) sets trust_remote_code: true, which runs the "
                    f"Python files of the model {remote!r}: pass {TRUST_REMOTE_CODE_FLAG} to "
                    "allow it (trust_remote_code=True in Python)"
                )
    model = config.model
    wants = "model" in sections and model is not None and model.trust_remote_code
    if wants and not trust_remote_code:
        assert model is not None
        found.append(
            "model.trust_remote_code: true runs the Python files of the model "
            f"{model.name_or_path!r}: pass {TRUST_REMOTE_CODE_FLAG} to allow it "
            "(trust_remote_code=True in Python)"
        )
    if found:
        raise CodeOptInError(
            "; ".join(found) + ". A config alone never runs code: allow it only for a config "
            "(and model) you trust"
        )


def validate(
    data: dict[str, Any],
    host: Host,
    *,
    require: tuple[str, ...] = (),
    config_dir: Path | None = None,
    set_keys: Sequence[str] = (),
    training: bool = True,
) -> RunConfig:
    """Validate a config dict against the registry; cross-checks run when the schema passes,
    and with ``training`` the warnings of :func:`learning_warnings`.

    Plugin params validators find ``config_dir`` in their validation context
    (``info.context["config_dir"]``) to resolve relative paths: the config file's directory,
    or the current directory for an entry whose params were given with ``--set``
    (``set_keys``) or a config that came from no file."""
    data = dict(data)
    if "training" in data and data["training"] is None:  # `training:` with every key commented out
        data["training"] = {}
    if isinstance(data.get("callbacks"), list):  # `callbacks: [my_logger]`: a name alone
        data["callbacks"] = [{"name": e} if isinstance(e, str) else e for e in data["callbacks"]]
    # Before the defaults: a TRL key may name the backend (use_vllm) or land in the defaulted
    # algorithm's params.
    defaults = {
        "algorithm": DEFAULT_ALGORITHM,
        "backend": DEFAULT_BACKEND,
        "environment": DEFAULT_ENVIRONMENT,
    }
    native = frozenset(TrainingConfig.model_fields)
    given = frozenset(set_keys)  # a --set wins over a TRL block's value for the same key
    moved = move_trl_keys(
        data, host, require=require, defaults=defaults, native=native, overridden=given
    )
    data = _with_defaults(data, require, host)
    moved += _environment_data(data, host)
    env = _environment_params(data, host)
    if env is not None and env[0].rewards(env[1]):  # the environment scores its episodes
        require = tuple(s for s in require if s != "rewards")
    problems = _missing_sections(data, require) + _unknown_names(data, host) + moved
    config = None
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        known = {p for p, _ in problems}
        also = {"training": list(TRL_KEYS)}  # a near miss of a TRL key: that key
        found = pydantic_problems(exc, "", RunConfig, also=also)
        problems += [p for p in found if p[0] not in known]
    params, found = _plugin_params(data, host, config_dir, set_keys)
    problems += found
    if problems or config is None:
        raise ConfigError(sort_problems(problems, SECTIONS))
    for entry, value in zip(_entries(config), params, strict=True):
        entry.params = value
    problems = cross_check(config, host)
    if problems:
        raise ConfigError(problems)
    if training:
        for message in learning_warnings(config, host):
            warnings.warn(message, ConfigWarning, stacklevel=2)
    return config


def _entries(config: RunConfig) -> list[PluginEntry]:
    """The plugin entries of ``config``, in the order of :func:`_raw_entries`."""
    plugins = (config.algorithm, config.backend, config.environment)
    return [*config.rewards, *(e for e in plugins if e is not None), *config.callbacks]


def _raw_entries(data: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(kind, path, entry dict)`` of every plugin entry in ``data``."""
    rewards = data.get("rewards")
    out = [("reward", f"rewards[{i}]", e) for i, e in enumerate(rewards or [])]
    kinds = ("algorithm", "backend", "environment")
    out += [(k, k, data[k]) for k in kinds if data.get(k) is not None]
    callbacks = data.get("callbacks")
    out += [("callback", f"callbacks[{i}]", e) for i, e in enumerate(callbacks or [])]
    return out


def _plugin_params(
    data: dict[str, Any], host: Host, config_dir: Path | None, set_keys: Sequence[str]
) -> tuple[list[Params], list]:
    """Each entry's params validated against its plugin's model; problems at their paths."""
    values: list[Params] = []
    problems: list[tuple[str, str]] = []
    if not isinstance(data.get("rewards", []), list) or not isinstance(
        data.get("callbacks", []), list
    ):
        return values, problems
    for kind, path, entry in _raw_entries(data):
        record = host.records[kind].get(str(entry.get("name"))) if isinstance(entry, dict) else None
        if record is None:
            values.append(Params())
            continue  # reported by _unknown_names
        model: type[Params] = record.params
        raw = entry.get("params")
        if raw is None:
            need = [k for k, f in model.model_fields.items() if f.is_required()]
            if need:
                msg = f"required field is missing: this plugin needs {', '.join(need)}"
                problems.append((f"{path}.params", msg))
                values.append(Params())
                continue
            raw = {}
        if not isinstance(raw, dict):
            problems.append((f"{path}.params", f"must be a mapping of params (got {raw!r})"))
            values.append(Params())
            continue
        owner = functools.partial(_owner_hint, host, kind, record.name)
        value, found = _entry_params(
            model, raw, f"{path}.params", config_dir, _set_params(path, set_keys), owner
        )
        values.append(value)
        problems += found
    return values, problems


def _set_params(path: str, set_keys: Sequence[str]) -> set[str] | None:
    """The params of entry ``path`` given with ``--set`` (top-level names); None when the whole
    entry or its whole ``params`` was."""
    fields: set[str] = set()
    for key in set_keys:
        if key in (path, f"{path}.params"):
            return None
        if key.startswith(f"{path}.params."):
            fields.add(re.split(r"[.\[]", key.removeprefix(f"{path}.params."), maxsplit=1)[0])
    return fields


def _entry_params(
    model: type[Params],
    raw: dict[str, Any],
    prefix: str,
    config_dir: Path | None,
    set_fields: set[str] | None,
    owner: Any,
) -> tuple[Params, list[tuple[str, str]]]:
    """One entry's params, validated with the directory each relative path in them resolves
    against (the validation context's ``config_dir``): the config file's for the params
    written there, the current one for those given with ``--set`` (``set_fields``; None: all
    of them). Params from both places are validated twice, once per directory, and each
    field is taken from the validation of its own."""
    cwd = Path.cwd()
    file_dir = cwd if config_dir is None or set_fields is None else config_dir
    mixed = bool(set_fields) and file_dir != cwd
    bases = [file_dir, cwd] if mixed else [file_dir]
    out: list[Params] = []
    problems: list[tuple[str, str]] = []
    for base in bases:
        try:
            out.append(model.model_validate(raw, context={"config_dir": base}))
        except ValidationError as exc:
            for path, msg in pydantic_problems(exc, prefix, model, owner):
                field = re.split(r"[.\[]", path.removeprefix(f"{prefix}."), maxsplit=1)[0]
                ours = path != prefix and field in (set_fields or ())
                if not mixed or ours == (base == cwd) or (path == prefix and base == file_dir):
                    problems.append((path, msg))
    if problems:
        return Params(), problems
    if not mixed:
        return out[0], []
    from_file, from_set = out
    chosen = {
        name: getattr(from_set if name in (set_fields or ()) else from_file, name)
        for name in model.model_fields
    }
    return model.model_construct(from_file.model_fields_set, **chosen), []


def _owner_hint(host: Host, kind: str, name: str, key: str) -> str | None:
    """Which other plugins of the same kind have ``key`` (``dynamic_sampling`` under grpo),
    since the fix is then the plugin's name rather than the key."""
    owners = [
        n for n, r in host.records[kind].items() if n != name and key in r.params.model_fields
    ]
    if not owners:
        return None
    names = " and ".join(owners)
    if kind == "reward":
        return f"it is a param of the {names} reward{'s' if len(owners) > 1 else ''}"
    return f"it is a param of {names} (set {kind}.name: {owners[0]})"


def _with_defaults(data: dict[str, Any], require: tuple[str, ...], host: Host) -> dict[str, Any]:
    data = dict(data)
    for section, default in (("algorithm", DEFAULT_ALGORITHM), ("backend", DEFAULT_BACKEND)):
        if section in require and data.get(section) is None:
            data[section] = {"name": default}
    # The environment needs no ``require``: a command that builds plugins (train, validate)
    # requires the algorithm, and every such run has an environment. Without the built-in
    # single_turn (plugins disabled) it stays None, which means the same.
    known = DEFAULT_ENVIRONMENT in host.environments
    if "algorithm" in require and data.get("environment") is None and known:
        data["environment"] = {"name": DEFAULT_ENVIRONMENT}
    return data


def _environment_params(data: dict[str, Any], host: Host) -> tuple[Any, Params] | None:
    """The environment entry's record and validated params, before the whole config is
    validated (None when there is no such entry or its params are invalid: those problems
    are reported with the entry)."""
    entry = data.get("environment")
    if not isinstance(entry, dict) or str(entry.get("name")) not in host.environments:
        return None
    record = host.environments[str(entry.get("name"))]
    try:
        params = record.params.model_validate(
            entry.get("params") or {}, context={"config_dir": Path.cwd()}
        )
    except ValidationError:
        return None
    return record, params


def _environment_data(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """Merge the ``data:`` keys an environment provides (``Environment.data``: it is its own
    task source) into ``data`` (in place), under the user's other ``data:`` keys. A key the
    user set to something else is a problem: the rows would have two sources."""
    env = _environment_params(data, host)
    if env is None:
        return []
    record, params = env
    provided = record.data(params)
    section = data.get("data") or {}
    if not provided or not isinstance(section, dict):
        return []
    clash = [k for k in ("path", "eval_path") if section.get(k) is not None]
    clash += [k for k in provided if section.get(k) not in (None, provided[k])]
    if clash:
        return [
            (
                f"data.{clash[0]}",
                f"environment {record.name!r} provides the rows (data.{', data.'.join(provided)} "
                f"from its params); remove data.{clash[0]}",
            )
        ]
    data["data"] = {**section, **provided}
    if record.multi_turn and section.get("chat_template") is None:
        data["data"]["chat_template"] = True  # what its episodes render with anyway
    return []


def _missing_sections(data: dict[str, Any], require: tuple[str, ...]) -> list[tuple[str, str]]:
    problems = []
    for section in require:
        if data.get(section) in (None, [], {}):
            problems.append((section, f"this command needs a `{section}:` section"))
    node = data.get("data")
    if (
        "data" in require
        and isinstance(node, dict)
        and node
        and node.get("path") is None
        and node.get("reasoning_gym") is None
    ):
        problems.append(
            (
                "data.path",
                "required field is missing: a .json/.jsonl/.parquet file, a directory of them or "
                "a hub dataset name (or data.reasoning_gym: a generated task)",
            )
        )
    for key in data:
        if key not in SECTIONS:
            hint = difflib.get_close_matches(key, SECTIONS, n=1)
            msg = f"unknown section {key!r}"
            msg += f"; did you mean {hint[0]!r}?" if hint else ""
            known = ", ".join(SECTIONS)
            problems.append((key, msg + f" -- sections: {known}, trl (a pasted TRL GRPOConfig)"))
    return problems


def _unknown_names(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """Plugin names that are not registered, with did-you-mean and failed plugins."""
    problems: list[tuple[str, str]] = []
    rewards = data.get("rewards")
    if rewards is not None and not isinstance(rewards, list):
        return [("rewards", "must be a list of {name, weight, params} entries")]
    callbacks = data.get("callbacks")
    if callbacks is not None and not isinstance(callbacks, list):
        return [("callbacks", "must be a list of callback names or {name, params} entries")]
    problems += _unknown_loggers(data, host)
    for kind, path, entry in _raw_entries(data):
        if not isinstance(entry, dict):
            problems.append((path, f"must be a mapping with a `name` (got {entry!r})"))
        elif "name" not in entry:
            names = ", ".join(sorted(host.records[kind]))
            problems.append((f"{path}.name", f"missing; available {kind}s: {names}"))
        elif entry["name"] not in host.records[kind]:
            problems.append((f"{path}.name", host.unknown_message(kind, str(entry["name"]))))
    return problems


def _unknown_loggers(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """``training.report_to`` names that are no registered callback (``none``, ``all`` aside)."""
    training = data.get("training")
    raw = training.get("report_to") if isinstance(training, dict) else None
    names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return [
        ("training.report_to", host.unknown_message("callback", name))
        for name in names
        if isinstance(name, str) and name not in ("none", "all") and name not in host.callbacks
    ]


# --------------------------------------------------------------------------- cross checks


def requirements(config: RunConfig, host: Host) -> Requirements:
    """The configured algorithm's requirements (defaults when no algorithm is configured)."""
    if config.algorithm is None:
        return Requirements()
    record = host.algorithms[config.algorithm.name]
    return record.requirements(config.algorithm.params)


def cross_check(config: RunConfig, host: Host) -> list[tuple[str, str]]:
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
    problems += _environment_reward_checks(config, host)
    problems += _lora_checks(config)
    problems += _learning_rate_checks(config.training)
    problems += host.validate_hooks(config)
    return problems


def multi_turn(config: RunConfig, host: Host) -> bool:
    """Whether ``config``'s episodes have turns (an environment that is not ``single_turn``)."""
    env = config.environment
    return env is not None and host.environments[env.name].multi_turn


def _environment_reward_checks(config: RunConfig, host: Host) -> list[tuple[str, str]]:
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


def _environment_checks(config: RunConfig, host: Host) -> list[tuple[str, str]]:
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


def _algorithm_checks(config: RunConfig, host: Host) -> list[tuple[str, str]]:
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
    if req.sampler_logprobs and not caps.sampler_logprobs:
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


def learning_warnings(config: RunConfig, host: Host) -> list[str]:
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


def dump(config: RunConfig) -> str:
    """The resolved config (defaults filled in) as YAML."""
    data = config.model_dump(mode="json", exclude_none=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
