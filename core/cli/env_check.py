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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import ValidationError

from rlvr.api.errors import RlvrError
from rlvr.api.host import Host, build_generator
from rlvr.api.registration import Sample
from rlvr.api.runtime import RunInfo, SamplingParams
from rlvr.config.schema import (
    ConfigError,
    DataConfig,
    EnvironmentEntry,
    ModelConfig,
    RunConfig,
    apply_overrides,
    load_config,
)
from rlvr.data.prompts import load_rows
from rlvr.model.loading import eos_token_ids, load_policy
from rlvr.model.tiny import build_tiny_model
from rlvr.rewards.scoring import Scorer
from rlvr.rollout.envcheck import (
    DEFAULT_ROWS,
    EpisodeRun,
    ScriptedGenerator,
    check_episodes,
    format_episode,
    run_episodes,
)
from rlvr.rollout.episodes import Episode, EpisodeLimits
from rlvr.rollout.tools import tool_call_format


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
    ``name``, when given, must be its environment."""
    config = load_config(
        path,
        host,
        overrides=[f"environment.params.{item}" for item in overrides],
        require=("environment",),
        training=False,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    entry = config.environment
    assert entry is not None  # required above
    if name is not None and name != entry.name:
        raise RlvrError(
            f"{path} runs the environment {entry.name!r}, not {name!r}; leave NAME out to "
            "check the config's"
        )
    return config


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
) -> tuple[list[str], EpisodeRun]:
    """Check environment ``name`` and run ``episodes`` episodes; the lines to print and the
    episodes. Raises :class:`~rlvr.api.errors.RlvrError` (conformance problems included).

    With a run ``config`` (:func:`from_config`), its environment entry (params and limits),
    data (rows, prompt field, system prompt), model and sampling settings are used unless an
    argument says otherwise, and its rewards score each episode's last assistant message."""
    if episodes < 1:
        raise RlvrError(f"--episodes must be at least 1 (got {episodes})")
    entry: EnvironmentEntry | None = None
    data_cfg: DataConfig | None = None
    if config is not None:
        entry, data_cfg = config.environment, config.data
        assert entry is not None
        name, record, params = entry.name, host.get("environment", entry.name), entry.params
        max_turns, turn_timeout = entry.max_turns, entry.turn_timeout
        max_tokens = config.training.max_completion_length
        if model is None and script is None and config.model is not None:
            model = config.model.name_or_path
        if tool_format == "auto":
            tool_format = entry.tool_call_format
    else:
        if name is None:
            raise RlvrError("give the environment's NAME, or a run config with --config")
        record, params = environment_params(host, name, overrides)
    if data is not None:
        rows = read_rows(data)
    elif data_cfg is not None:
        rows = load_rows(data_cfg)[: max(episodes, 2)]
    else:
        rows = list(DEFAULT_ROWS)
    messages = read_script(script) if script is not None else None
    checked = check_episodes(
        record, params, rows=rows, script=messages, timeout=turn_timeout, data=data_cfg
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
        if config is not None and config.model is not None:
            model_cfg = config.model.model_copy(update={"name_or_path": directory})
        try:
            policy, tokenizer = load_policy(model_cfg, device="cpu", dtype=torch.float32)
        except OSError as exc:
            raise RlvrError(f"--model {directory!r}: cannot load it ({exc})") from None
        eos = eos_token_ids(policy, tokenizer)
        if messages is not None:
            generator: Any = ScriptedGenerator(tokenizer, messages, eos[0])
            turns = min(max_turns, len(messages))
            turn_tokens = max(len(tokenizer(m)["input_ids"]) for m in messages) + 1
            what = f"the script {script} ({len(messages)} messages)"
        else:
            hf = host.get("backend", "hf")
            run = RunInfo(max_completion_length=max_tokens, num_generations=1, seed=seed)
            generator = build_generator(hf, hf.params(), run, policy, tokenizer)
            turns, turn_tokens = max_turns, max_tokens
            what = f"the model {model}" if model else "a tiny random model (--model for yours)"
        sampling = SamplingParams(max_tokens=turn_tokens, temperature=1.0, seed=seed)
        if config is not None:
            sampling = SamplingParams.from_training(config.training, seed)
        template = getattr(tokenizer, "chat_template", None)
        parse = tool_call_format(template, tool_format)
        if model is None and tool_format == "auto":
            parse = "hermes"  # the tiny model stands in for a model whose template has tools
        budget = entry.max_episode_tokens if entry is not None else None
        limits = EpisodeLimits(
            max_turns=turns,
            max_tokens=budget or turns * turn_tokens + 4096,
            turn_timeout=turn_timeout,
            episode_timeout=turn_timeout * (turns + 2),
            tool_call_format=parse,
        )
        result = run_episodes(
            record,
            params,
            generator=generator,
            tokenizer=tokenizer,
            eos_ids=eos,
            rows=rows,
            episodes=episodes,
            limits=limits,
            max_turn_tokens=turn_tokens,
            sampling=sampling,
            data=data_cfg,
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    lines.append(f"{episodes} episode(s), policy: {what}, tool calls read as {parse}")
    scored = _score(config, host, result.episodes) if config and config.rewards else None
    for k, e in enumerate(result.episodes):
        lines.append(format_episode(e, tokenizer, k))
        if scored is not None:
            lines.append(f"config rewards (of the last assistant message): {scored[k]}")
    c = result.counts
    lines.append(
        f"summary: {c['env/episodes']:g} episodes, {c['env/failed']:g} failed, turns "
        f"{c['env/turns_mean']:.2f} on average, truncated {c['env/truncated_frac']:.0%}, "
        f"environment tokens {c['env/env_token_frac']:.0%}, {result.seconds:.2f}s"
    )
    return lines, result


def _score(config: RunConfig, host: Host, episodes: list[Episode]) -> list[str]:
    """Each episode's config rewards, as the trainer scores its last assistant message."""
    samples = [
        Sample(
            completion=e.final_text,
            prompt=str(e.row.get(config.data.prompt_field if config.data else "prompt", "")),
            row=e.row,
            num_tokens=sum(e.action_mask),
            group=e.prompt_index,
        )
        for e in episodes
    ]
    with Scorer.for_config(config, host, workers=0) as scorer:
        scores = scorer.score(samples, by_group=True)
    out = []
    for i, e in enumerate(episodes):
        if e.failed:
            out.append("not scored (the episode failed)")
            continue
        each = ", ".join(
            f"{label}={'None' if v[i] is None else f'{v[i]:g}'}"
            for label, v in scores.per_reward.items()
        )
        out.append(f"{each}; weighted sum {scores.total[i]:g}")
    return out


__all__ = ["env_check", "environment_params", "from_config", "read_rows", "read_script"]
