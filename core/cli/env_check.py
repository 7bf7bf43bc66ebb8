"""``rlvr env check NAME``: an environment's conformance checks, then a few episodes printed
with their loss mask, before a GPU is spent on it.

The episodes run through the trainer's own episode runner: the same chat-template rendering,
tokens and loss mask as training. The policy is a script (``--script FILE``: the assistant
messages to send, turn by turn, so tool calls can be tested without a model), a local model
(``--model PATH``), or by default a tiny random model built on the spot (it shows the token
layer, not sensible answers).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError

from rlvr.api.errors import RlvrError
from rlvr.api.host import Host, build_generator
from rlvr.api.runtime import RunInfo, SamplingParams
from rlvr.config.schema import (
    ConfigError,
    DataConfig,
    EnvironmentEntry,
    ModelConfig,
    RunConfig,
    TrainingConfig,
    apply_overrides,
    check_code_opt_ins,
    load_config,
)
from rlvr.data.prompts import PromptSet, load_rows
from rlvr.model.loading import eos_token_ids, load_policy
from rlvr.model.tiny import build_tiny_model
from rlvr.rewards.scoring import Scorer
from rlvr.rollout.completions import Completion
from rlvr.rollout.envcheck import DEFAULT_ROWS, ScriptedGenerator, check_episodes, format_episode
from rlvr.rollout.episodes import Episode, episode_runner
from rlvr.rollout.sampling import sample_and_score


def read_script(path: str | Path) -> list[str]:
    """The assistant messages of a script file: a YAML or JSON list of strings."""
    p = Path(path)
    if not p.is_file():
        raise RlvrError(f"--script {str(p)!r}: no such file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RlvrError(f"--script {p}: cannot parse it ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, list) or not data or not all(isinstance(x, str) for x in data):
        raise RlvrError(
            f"--script {p}: expected a YAML or JSON list of strings (the assistant messages, "
            f'one per turn), e.g. ["<tool_call>...</tool_call>", "The answer is 42."]'
        )
    return data


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Dataset rows from a JSONL file (the rows episodes start from)."""
    p = Path(path)
    if not p.is_file():
        raise RlvrError(f"--data {str(p)!r}: no such file")
    rows = []
    for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RlvrError(f"--data {p}: line {k} is not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise RlvrError(f"--data {p}: line {k} is not a JSON object (a dataset row)")
        rows.append(row)
    if not rows:
        raise RlvrError(f"--data {p}: no rows")
    return rows


def environment_params(host: Host, name: str, overrides: Sequence[str]) -> tuple[Any, Any]:
    """The record of environment ``name`` and its params from ``--set KEY=VALUE`` items."""
    try:
        record = host.get("environment", name)
    except KeyError as exc:
        raise RlvrError(f"{exc.args[0]} (`rlvr plugins` lists the installed ones)") from None
    try:
        data = apply_overrides({}, list(overrides))
    except ConfigError as exc:
        raise RlvrError("; ".join(f"{p}: {m}" for p, m in exc.problems)) from None
    try:
        params = record.params.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or 'params'}: {err['msg']}"
            for err in exc.errors()
        )
        fields = ", ".join(record.params.model_fields) or "none"
        raise RlvrError(
            f"environment {name!r}: bad params ({problems}); set them with --set KEY=VALUE "
            f"(its params: {fields})"
        ) from None
    return record, params


def from_config(
    host: Host,
    path: str,
    name: str | None,
    overrides: Sequence[str],
    *,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> RunConfig:
    """The run config ``path`` with ``--set KEY=VALUE`` applied to its environment's params;
    ``name``, when given, must be its environment, or is it when the config has no
    ``environment:`` section (a single-turn config checked with ``rlvr env check NAME -c``)."""

    def named(data: dict[str, Any]) -> dict[str, Any]:
        if name is None or data.get("environment"):
            return data
        return {**data, "environment": {"name": name}}

    config = load_config(
        path,
        host,
        overrides=[f"environment.params.{item}" for item in overrides],
        require=("environment",),
        training=False,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
        amend=named,
    )
    entry = config.environment
    assert entry is not None  # required above
    if name is not None and name != entry.name:
        raise RlvrError(
            f"{path} runs the environment {entry.name!r}, not {name!r}; leave NAME out to "
            "check the config's"
        )
    return config


def check_config(
    host: Host,
    name: str,
    overrides: Sequence[str],
    *,
    max_turns: int,
    max_tokens: int,
    turn_timeout: float,
    tool_format: str,
    seed: int,
) -> RunConfig:
    """The run config ``rlvr env check NAME`` runs episodes with, without a config file: the
    environment with its ``--set`` params and the command's limits, rows rendered with the chat
    template, no rewards (the environment's own rewards still count)."""
    _, params = environment_params(host, name, overrides)
    entry = EnvironmentEntry(
        name=name,
        params=params,
        max_turns=max_turns,
        # room for the environment's messages too
        max_episode_tokens=max_turns * max_tokens + 4096,
        turn_timeout=turn_timeout,
        episode_timeout=turn_timeout * (max_turns + 2),
        tool_call_format=tool_format,
    )
    return RunConfig(
        data=DataConfig(path="-", chat_template=True),
        environment=entry,
        training=TrainingConfig(max_completion_length=max_tokens, temperature=1.0, seed=seed),
    )


@dataclass
class EpisodeRun:
    """What ``rlvr env check`` ran: the episodes, their scored completions (same order), the
    wall time they took and their ``env/...`` counts."""

    episodes: list[Episode]
    completions: list[Completion]
    seconds: float
    counts: dict[str, float]


def env_check(
    host: Host,
    name: str | None,
    *,
    overrides: Sequence[str] = (),
    episodes: int = 2,
    model: str | None = None,
    script: str | None = None,
    data: str | None = None,
    max_turns: int = 4,
    max_tokens: int = 32,
    seed: int = 0,
    turn_timeout: float = 30.0,
    tool_format: str = "auto",
    config: RunConfig | None = None,
    allow_code: bool = False,
) -> tuple[list[str], EpisodeRun]:
    """Check environment ``name`` and run ``episodes`` episodes; the lines to print and the
    episodes. Raises :class:`~rlvr.api.errors.RlvrError` (conformance problems included).

    The episodes run and are scored as training runs and scores them
    (:func:`~rlvr.rollout.episodes.episode_runner`,
    :func:`~rlvr.rollout.sampling.sample_and_score`). With a run ``config``
    (:func:`from_config`), its environment entry (params and limits), data (rows, prompt
    field, system prompt), model, sampling settings and rewards are used unless an argument
    says otherwise; without one, the arguments' limits and no configured rewards, and
    ``allow_code`` lets its ``--set`` params run code (a config's is checked when loaded)."""
    if episodes < 1:
        raise RlvrError(f"--episodes must be at least 1 (got {episodes})")
    if config is None:
        if name is None:
            raise RlvrError("give the environment's NAME, or a run config with --config")
        tool_format = "hermes" if model is None and tool_format == "auto" else tool_format
        # (the tiny model stands in for a model whose template has tools)
        config = check_config(
            host,
            name,
            overrides,
            max_turns=max_turns,
            max_tokens=max_tokens,
            turn_timeout=turn_timeout,
            tool_format=tool_format,
            seed=seed,
        )
        check_code_opt_ins(
            config, host, ("environment",), allow_code=allow_code, trust_remote_code=True
        )
    else:
        if model is None and script is None and config.model is not None:
            model = config.model.name_or_path
        if config.data is None:  # the built-in rows, rendered with the chat template
            config = config.model_copy(update={"data": DataConfig(path="-", chat_template=True)})
    entry, data_cfg = config.environment, config.data
    assert entry is not None and data_cfg is not None
    name, record, params = entry.name, host.get("environment", entry.name), entry.params
    if data is not None:
        rows = read_rows(data)
    elif data_cfg.path != "-":
        rows = load_rows(data_cfg)[: max(episodes, 2)]
    else:
        rows = list(DEFAULT_ROWS)
    messages = read_script(script) if script is not None else None
    checked = check_episodes(
        record, params, rows=rows, script=messages, timeout=entry.turn_timeout, data=data_cfg
    )
    lines = [
        f"environment {name!r}" + (f" ({record.dist})" if record.dist else "") + f": {params!r}",
        f"conformance: OK ({len(checked)} episodes alone and two side by side, "
        f"{'the script' if messages else 'the built-in probe messages'}: start, respond, "
        "close, tool schemas, rewards, no state shared between episodes)",
    ]
    scratch = None
    try:
        if model is None:
            scratch = Path(tempfile.mkdtemp(prefix="rlvr-env-check-"))
            directory = str(build_tiny_model(scratch / "model"))
        else:
            directory = model
        model_cfg = ModelConfig(name_or_path=directory)
        if config.model is not None:
            model_cfg = config.model.model_copy(update={"name_or_path": directory})
        try:
            policy, tokenizer = load_policy(model_cfg, device="cpu", dtype=torch.float32)
        except OSError as exc:
            raise RlvrError(f"--model {directory!r}: cannot load it ({exc})") from None
        eos = eos_token_ids(policy, tokenizer)
        run = RunInfo.from_config(config, num_generations=1, multi_turn=True)
        if messages is not None:
            generator: Any = ScriptedGenerator(tokenizer, messages, eos[0])
            turns = min(entry.max_turns, len(messages))
            config = config.model_copy(
                update={"environment": entry.model_copy(update={"max_turns": turns})}
            )
            what = f"the script {script} ({len(messages)} messages)"
        else:
            hf = host.get("backend", "hf")
            generator = build_generator(hf, hf.params(), run, policy, tokenizer)
            what = f"the model {model}" if model else "a tiny random model (--model for yours)"
        prompts = PromptSet(rows, data_cfg, tokenizer, None)
        runner = episode_runner(config, host, run, generator, prompts, eos)
        parse = runner.limits.tool_call_format
        sampling = SamplingParams.from_training(config.training, seed)
        labels = [e.key for e in config.rewards]
        t0 = time.perf_counter()
        try:
            with Scorer.for_config(config, host, workers=0) as scorer:
                got = sample_and_score(
                    runner,
                    scorer,
                    prompts,
                    [i % len(rows) for i in range(episodes)],
                    1,
                    sampling,
                    labels,
                    backend="script" if messages is not None else "hf",
                )
        finally:
            runner.close()
        result = EpisodeRun(
            runner.last_episodes, got.items, time.perf_counter() - t0, dict(runner.last_counts)
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    lines.append(f"{episodes} episode(s), policy: {what}, tool calls read as {parse}")
    for k, (e, c) in enumerate(zip(result.episodes, result.completions, strict=True)):
        lines.append(format_episode(e, tokenizer, k))
        lines.append(_score_line(c))
    n = result.counts
    lines.append(
        f"summary: {n['env/episodes']:g} episodes, {n['env/failed']:g} failed, turns "
        f"{n['env/turns_mean']:.2f} on average, truncated {n['env/truncated_frac']:.0%}, "
        f"environment tokens {n['env/env_token_frac']:.0%}, {result.seconds:.2f}s"
    )
    return lines, result


def _score_line(c: Completion) -> str:
    """An episode's rewards as training scores it: each reward (the configured ones of its
    last assistant message, the environment's), then the total with their weights."""
    if c.failed:
        return "score: none (the episode failed: not scored, as in training)"
    each = ", ".join(f"{k}={'None' if v is None else f'{v:g}'}" for k, v in c.rewards.items())
    return f"score: {each or 'no rewards'}; weighted total {c.score:g} (as training scores it)"


__all__ = [
    "EpisodeRun",
    "check_config",
    "env_check",
    "environment_params",
    "from_config",
    "read_rows",
    "read_script",
]
