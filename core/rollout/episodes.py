"""Multi-turn episodes: rlvr owns the tokens, the environment owns the messages.

An episode starts from a dataset row (the environment's ``start``), and then, turn by turn:
the model samples an assistant message continuing from the exact token ids so far, the
environment answers it (``respond``), and its messages are appended as tokens. What is trained
is exactly that sequence: the sampled tokens (loss mask 1, with the sampler's log-probs) and the
environment's (loss mask 0). Nothing is re-tokenized from the conversation, because a chat
template rendering of the whole conversation need not give back the sampled tokens (a
different split of the same text, a template that rewrites past turns): training on a
re-rendered conversation computes log-probs of tokens the model never produced. How often that
would have happened is measured (``env/prefix_drift``).

The environment's messages become tokens by the template's delta: render the conversation
before and after them, take the new suffix. After the sampled end-of-turn token, the template
may write more of the assistant turn (Qwen's newline after ``<|im_end|>``): that bridge belongs
to the environment's tokens too.

The live episodes of a call sample together (one ``generate`` per turn, on any backend; a
generator with an ``awake()`` context manager, vllm's, is held awake across the turns).
Environment calls run on an event loop in a thread of their own
(:mod:`rlvr.rollout.event_loop`), concurrently; each is bounded by the entry's ``turn_timeout``
and what is left of its ``episode_timeout``. A call that raises (``SystemExit`` included) or
runs out of time fails its episode, and so does one that blocks the event loop (the loop is then
replaced; calls still waiting on that loop fail with it): the failure is counted and logged (one
line per call of :meth:`EpisodeRunner.run`, however many failed: of each kind the count and the
first one's cause, :func:`failure_summary`; in training each episode's own cause is a line of
``OUTPUT_DIR/env_errors.jsonl``), and the episode is left out of the step (not credited, not
scored: its reward would say nothing about the policy; past ``training.max_failed_episode_frac``
of a step's episodes the run stops). A crash that ends the process itself (``os._exit``, a
segfault) is out of reach of a thread; such an environment must run its work in a process of its
own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.api.host import build_environment
from rlvr.api.runtime import (
    GROUP_REWARDS,
    EnvironmentImpl,
    EpisodeStart,
    Generator,
    RunInfo,
    SamplingParams,
)
from rlvr.config.schema import RunConfig
from rlvr.data.prompts import PromptSet, prompt_messages
from rlvr.rollout.env_outputs import response_problem, reward_values, start_problem
from rlvr.rollout.event_loop import EnvironmentLoop
from rlvr.rollout.template_tools import TemplateTools, for_template, template_tools
from rlvr.rollout.tools import parse_tool_calls, tool_call_format

logger = logging.getLogger("rlvr.rollout.episodes")


@dataclass(frozen=True)
class EpisodeLimits:
    """The environment entry's limits (:class:`rlvr.config.schema.EnvironmentEntry`)."""

    max_turns: int
    max_tokens: int
    turn_timeout: float
    episode_timeout: float
    tool_call_format: str


@dataclass
class Episode:
    """One episode's state: its tokens, where they came from, and its conversation."""

    prompt_index: int
    group: int
    row: dict[str, Any]
    prompt_ids: list[int] = field(default_factory=list)
    #: the first prompt as the chat template rendered it (tools, few-shot calls and all)
    prompt_text: str = ""
    token_ids: list[int] = field(default_factory=list)
    #: 1 on sampled tokens, 0 on the environment's.
    action_mask: list[int] = field(default_factory=list)
    #: the sampler's log-prob of each token (0.0 on the environment's).
    logprobs: list[float] = field(default_factory=list)
    #: False when the backend returned no log-probs (``logprobs`` then means nothing).
    sampled_logprobs: bool = True
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    state: Any = None
    started: bool = False
    done: bool = False
    truncated: bool = False
    turns: int = 0
    #: why a truncated episode was cut: "tokens" (a turn reached max_completion_length, or
    #: the episode its token budget) or "turns" (max_turns); None: not truncated.
    cut: str | None = None
    tool_calls: int = 0
    rewards: dict[str, float] = field(default_factory=dict)
    failed: str | None = None
    env_seconds: float = 0.0
    #: the text the chat template rendered for ``messages`` (with the generation prompt when
    #: the model is to answer next).
    rendered: str = ""
    #: the whole episode after its first prompt, decoded (what a reward whose scope is
    #: ``transcript`` scores); set when the episode ends.
    transcript_text: str = ""

    @property
    def final_text(self) -> str:
        """The last assistant message's content: what the rewards score."""
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                return str(m.get("content") or "")
        return ""


@dataclass
class EpisodeRunner:
    """Runs the multi-turn episodes of a rollout (:meth:`run`) for the trainer."""

    environment: EnvironmentImpl
    environment_name: str
    generator: Generator
    tokenizer: Any
    prompts: PromptSet
    limits: EpisodeLimits
    #: ``training.max_completion_length``: the most tokens of one sampled turn.
    max_turn_tokens: int
    eos_ids: Sequence[int]
    #: ``data.chat_template_kwargs``.
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: ``environment.reward_weights``: the weight of each named reward in an episode's score
    #: (1.0 for a name not listed); applied by :func:`rlvr.rollout.sampling.add_env_rewards`.
    reward_weights: dict[str, float] = field(default_factory=dict)
    #: the reward names the environment declares (``Environment(rewards=...)``), the only ones
    #: an episode may return; None: not declared, any name.
    declared_rewards: tuple[str, ...] | None = None
    loop: EnvironmentLoop = field(default_factory=EnvironmentLoop)
    #: counts of the last :meth:`run` (``env/<name>`` metrics).
    last_counts: dict[str, float] = field(default_factory=dict)
    #: the episodes of the last :meth:`run` (``rlvr env check`` prints them).
    last_episodes: list[Episode] = field(default_factory=list)
    #: where :meth:`run` appends a JSON line per failed episode (step, index, row, cause);
    #: None: nowhere (the warning alone).
    errors_path: Path | None = None
    #: the token budget's share of cut episodes above which :meth:`run` warns (once).
    cut_warning_frac: float = 0.5
    _warned_cut: bool = field(default=False, repr=False)
    _template_tools: TemplateTools | None = field(default=None, repr=False)

    def run(
        self,
        indices: Sequence[int],
        n: int,
        sampling: SamplingParams,
        first_group: int = 0,
        step: int = 0,
    ) -> list[Episode]:
        """``n`` episodes of each prompt ``indices[j]``, in group ``first_group + j``."""
        episodes = [
            Episode(prompt_index=i, group=first_group + j, row=self.prompts[i].row)
            for j, i in enumerate(indices)
            for _ in range(n)
        ]
        self._start(episodes)
        turn = 0
        # A backend that frees its memory between calls (vllm's sleep mode) stays awake for
        # all the turns, so each turn finds the conversation so far in its prefix cache.
        awake = getattr(self.generator, "awake", None)
        with awake() if callable(awake) else contextlib.nullcontext():
            while True:
                live = [e for e in episodes if not e.done]
                if not live:
                    break
                self._sample(live, dataclasses.replace(sampling, logprobs=True), turn)
                self._respond([e for e in live if not e.done])
                turn += 1
        if callable(getattr(self.environment, GROUP_REWARDS, None)):
            self._group_rewards(episodes)
        self._close([e for e in episodes if e.started])
        for e in episodes:
            e.transcript_text = self.tokenizer.decode(e.token_ids, skip_special_tokens=True)
        failed = [e for e in episodes if e.failed is not None]
        if failed:  # one line per call, however many failed; each one's cause in the file
            summary = failure_summary(step, self.environment_name, failed, len(episodes))
            if self.errors_path is not None:
                self._record(step, failed)
                summary += f"; each one in {self.errors_path}"
            logger.warning(summary)
        self._warn_cut(step, [e for e in episodes if e.failed is None])
        self.last_counts = self._counts(episodes)
        self.last_episodes = episodes
        return episodes

    def _record(self, step: int, failed: list[Episode]) -> None:
        """One line of :attr:`errors_path` per failed episode: what the warning summarises."""
        assert self.errors_path is not None
        lines = [
            json.dumps(
                {
                    "step": step,
                    "environment": self.environment_name,
                    "index": e.prompt_index,
                    "group": e.group,
                    "failed": e.failed,
                    "turns": e.turns,
                    "row": e.row,
                },
                ensure_ascii=False,
                default=str,
            )
            + "\n"
            for e in failed
        ]
        try:
            with open(self.errors_path, "a", encoding="utf-8") as f:
                f.write("".join(lines))
        except OSError as exc:  # the warning still says what failed
            logger.warning("could not record failed episodes in %s: %s", self.errors_path, exc)

    def _warn_cut(self, step: int, ended: list[Episode]) -> None:
        """Once per runner: warn when more than :attr:`cut_warning_frac` of the episodes
        that ended were cut by tokens (a turn at ``max_completion_length``, or the episode at
        its budget) rather than ended by the environment (#45: the default budget cut 87-94%
        of a run's episodes, silently)."""
        cut = sum(e.cut == "tokens" for e in ended)
        if self._warned_cut or not ended or cut / len(ended) <= self.cut_warning_frac:
            return
        self._warned_cut = True
        logger.warning(
            "step %d: %d of %d episodes of environment %r were cut by tokens before the "
            "environment ended them (a turn reached training.max_completion_length=%d, or the "
            "episode its budget of environment.max_episode_tokens=%d tokens, which the "
            "environment's messages spend too; null: max_turns x max_completion_length): the "
            "environment never answered their last turn. Raise environment.max_episode_tokens "
            "or training.max_completion_length; env/truncated_frac tracks it per step (this "
            "warning is shown once)",
            step,
            cut,
            len(ended),
            self.environment_name,
            self.max_turn_tokens,
            self.limits.max_tokens,
        )

    def close(self) -> None:
        self.loop.close()

    # ------------------------------------------------------------------ the steps

    def _env_timeout(self, e: Episode) -> float:
        left = self.limits.episode_timeout - e.env_seconds
        return max(min(self.limits.turn_timeout, left), 0.001)

    def _call(self, episodes: list[Episode], coros: list[Any]) -> list[Any]:
        """Run one environment call per episode; a failure ends its episode."""
        calls = [(c, self._env_timeout(e)) for e, c in zip(episodes, coros, strict=True)]
        out = []
        results = self.loop.run(calls)
        for e, (value, cause, spent), (_, timeout) in zip(episodes, results, calls, strict=True):
            e.env_seconds += spent
            past = e.env_seconds >= self.limits.episode_timeout
            bounded_by_episode = timeout < self.limits.turn_timeout
            if past and (cause is None or (bounded_by_episode and "timed out" in cause)):
                cause = f"ran past episode_timeout={self.limits.episode_timeout:g}s"
            if cause is not None:
                e.failed, e.done = cause, True
            out.append(value)
        return out

    def _start(self, episodes: list[Episode]) -> None:
        coros = [
            self.environment.start(dict(e.row), prompt_messages(e.row, self.prompts.data))
            for e in episodes
        ]
        for e, start in zip(episodes, self._call(episodes, coros), strict=True):
            if e.failed is not None:
                e.failed = f"start {e.failed}"
                continue
            e.started = True
            why = start_problem(start)
            if why is not None:
                e.failed, e.done = f"start {why}", True
                continue
            assert isinstance(start, EpisodeStart)
            e.messages, e.tools, e.state = list(start.messages), start.tools, start.state
            try:
                e.rendered = self._render(e.messages, e.tools, generation=True)
            except Exception as exc:
                e.failed, e.done = f"the chat template cannot render its messages: {exc}", True
                continue
            e.prompt_ids, e.prompt_text = self._tokens(e.rendered), e.rendered
            limit = self.prompts.max_prompt_length
            if limit is not None and len(e.prompt_ids) > limit:
                e.failed, e.done = (
                    f"its first prompt has {len(e.prompt_ids)} tokens, over "
                    f"training.max_prompt_length={limit}",
                    True,
                )

    def _sample(self, live: list[Episode], sampling: SamplingParams, turn: int) -> None:
        """One turn of every live episode, in one ``generate`` call."""
        left = [self.limits.max_tokens - len(e.token_ids) for e in live]
        max_tokens = max(1, min(self.max_turn_tokens, max(left)))
        seed = None if sampling.seed is None else (sampling.seed + 7919 * turn) & 0x7FFFFFFF
        call = dataclasses.replace(sampling, max_tokens=max_tokens, seed=seed)
        out = self.generator.generate([e.prompt_ids + e.token_ids for e in live], 1, call)
        for k, e in enumerate(live):
            ids = list(out.token_ids[k])
            if out.logprobs is None:  # a backend that ignores ``logprobs``: none to keep
                e.sampled_logprobs = False
                lps = [0.0] * len(ids)
            else:
                lps = list(out.logprobs[k])
            cut = bool(out.truncated[k])
            if len(ids) > left[k]:
                ids, lps, cut = ids[: left[k]], lps[: left[k]], True
            e.token_ids += ids
            e.action_mask += [1] * len(ids)
            e.logprobs += lps
            e.turns += 1
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            calls = parse_tool_calls(text, self.limits.tool_call_format)
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
                e.tool_calls += len(calls)
            e.messages.append(message)
            if cut:  # a turn cut short cannot be answered
                e.truncated, e.done, e.cut = True, True, "tokens"

    def _respond(self, live: list[Episode]) -> None:
        coros = [self.environment.respond(e.state, e.messages[-1]) for e in live]
        for e, response in zip(live, self._call(live, coros), strict=True):
            if e.failed is not None:
                e.failed = f"respond {e.failed}"
                continue
            why = response_problem(response, self.declared_rewards)
            if why is not None:
                e.failed, e.done = f"respond {why}", True
                continue
            e.rewards.update(reward_values(response.rewards)[0])
            if response.done:
                e.messages += response.messages
                e.done = True
                continue
            if e.turns >= self.limits.max_turns:
                e.messages += response.messages
                e.truncated, e.done, e.cut = True, True, "turns"
                continue
            self._append(e, response.messages)

    def _group_rewards(self, episodes: list[Episode]) -> None:
        """The environment's group-level hook: once per prompt, on the episodes of its group
        that did not fail; its rewards are merged into theirs. A failure of the call fails
        those episodes (their rewards are unknown)."""
        groups: dict[int, list[Episode]] = {}
        for e in episodes:
            if e.failed is None and e.started:
                groups.setdefault(e.group, []).append(e)
        hook = getattr(self.environment, GROUP_REWARDS)
        members = list(groups.values())
        calls = [
            (hook([e.state for e in g], [list(e.messages) for e in g]), self.limits.turn_timeout)
            for g in members
        ]
        for g, (value, cause, _) in zip(members, self.loop.run(calls), strict=True):
            if cause is None and (not isinstance(value, list | tuple) or len(value) != len(g)):
                got = f"{len(value)} values" if isinstance(value, list | tuple) else repr(value)
                cause = (
                    f"returned {got[:80]} for a group of {len(g)} episodes; it returns one "
                    "dict of named rewards per episode, in order"
                )
            for k, e in enumerate(g):
                why = cause
                if why is None:
                    values, why = reward_values(value[k], self.declared_rewards)
                    if why is None:
                        e.rewards.update(values)
                if why is not None:
                    e.failed, e.done = f"{GROUP_REWARDS} {why}", True

    def _append(self, e: Episode, new: list[dict[str, Any]]) -> None:
        """The environment's messages as tokens: the template's delta for them."""
        before_assistant = e.rendered
        try:
            with_assistant = self._render(e.messages, e.tools, generation=False)
            e.messages += new
            after = self._render(e.messages, e.tools, generation=True)
        except Exception as exc:
            e.failed, e.done = f"the chat template cannot render the conversation: {exc}", True
            return
        if not after.startswith(with_assistant):
            e.failed = "the chat template rewrites earlier turns when messages are added"
            e.done = True
            return
        text = self._bridge(before_assistant, with_assistant, e) + after[len(with_assistant) :]
        ids = self._tokens(text)
        if len(e.token_ids) + len(ids) >= self.limits.max_tokens:
            e.truncated, e.done, e.cut = True, True, "tokens"  # no room left to answer them
            return
        e.token_ids += ids
        e.action_mask += [0] * len(ids)
        e.logprobs += [0.0] * len(ids)
        e.rendered = after

    def _bridge(self, before: str, with_assistant: str, e: Episode) -> str:
        """What the template writes after the sampled end of the assistant's turn (the
        newline after Qwen's ``<|im_end|>``): the rendered assistant turn past the text the
        model sampled, or past its end-of-turn token when the template reformats the turn."""
        if not with_assistant.startswith(before):
            return ""
        rendered = with_assistant[len(before) :]
        sampled = self.tokenizer.decode(e.token_ids[self._turn_start(e) :])
        if rendered.startswith(sampled):
            return rendered[len(sampled) :]
        eos = self.tokenizer.decode([e.token_ids[-1]]) if e.token_ids else ""
        if eos and e.token_ids[-1] in self.eos_ids and eos in rendered:
            return rendered[rendered.rindex(eos) + len(eos) :]
        return ""

    @staticmethod
    def _turn_start(e: Episode) -> int:
        """Where the last sampled turn begins in ``e.token_ids``."""
        k = len(e.action_mask)
        while k > 0 and e.action_mask[k - 1] == 1:
            k -= 1
        return k

    def _close(self, episodes: list[Episode]) -> None:
        coros = [self.environment.close(e.state) for e in episodes]
        results = self.loop.run([(c, self.limits.turn_timeout) for c in coros])
        for e, (_, cause, _) in zip(episodes, results, strict=True):
            if cause is not None:
                logger.warning(
                    "environment %r: close of an episode (row %d) %s",
                    self.environment_name,
                    e.prompt_index,
                    cause,
                )

    # ------------------------------------------------------------------ tokens

    def _render(self, messages: list[dict[str, Any]], tools: Any, *, generation: bool) -> str:
        """The chat template's text of ``messages``; what it renders nothing of (tools, calls)
        written in the parsed format (:mod:`rlvr.rollout.template_tools`)."""
        if self.limits.tool_call_format != "none":
            if self._template_tools is None:
                self._template_tools = template_tools(self.tokenizer, self.template_kwargs)
            messages, tools = for_template(
                messages, tools, self.limits.tool_call_format, self._template_tools
            )
        kwargs = dict(self.template_kwargs)
        if tools:
            kwargs["tools"] = tools
        return str(
            self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=generation, **kwargs
            )
        )

    def _tokens(self, text: str) -> list[int]:
        # The template writes its own special tokens, as for single-turn prompts.
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def drifted(self, e: Episode) -> bool:
        """Whether re-rendering ``e``'s conversation and tokenizing it gives other tokens than
        the ones sampled and appended (what a re-tokenizing trainer would train on)."""
        if not e.token_ids:
            return False
        try:
            upto = self._messages_through_last_assistant(e)
            text = self._render(e.messages[:upto], e.tools, generation=False)
        except Exception:
            return True
        ids = self._tokens(text)
        sequence = e.prompt_ids + e.token_ids
        return ids[: len(sequence)] != sequence

    @staticmethod
    def _messages_through_last_assistant(e: Episode) -> int:
        for k in range(len(e.messages) - 1, -1, -1):
            if e.messages[k].get("role") == "assistant":
                return k + 1
        return len(e.messages)

    def _counts(self, episodes: list[Episode]) -> dict[str, float]:
        ok = [e for e in episodes if e.failed is None]
        out = {
            "env/episodes": float(len(episodes)),
            "env/failed": float(len(episodes) - len(ok)),
            "env/truncated_frac": sum(e.truncated for e in ok) / max(len(ok), 1),
            "env/turns_mean": sum(e.turns for e in ok) / max(len(ok), 1),
            "env/tool_calls_mean": sum(e.tool_calls for e in ok) / max(len(ok), 1),
            "env/tool_call_rate": sum(e.tool_calls > 0 for e in ok) / max(len(ok), 1),
            "env/prefix_drift": float(sum(self.drifted(e) for e in ok)),
            "env/env_token_frac": (
                sum(e.action_mask.count(0) for e in ok)
                / max(sum(len(e.action_mask) for e in ok), 1)
            ),
        }
        return out


def failure_summary(step: int, environment: str, failed: Sequence[Episode], total: int) -> str:
    """One line for the failed episodes of a call: how many, and per kind of failure (the
    cause up to its first ``": "``: ``start raised TimeoutError``, ``respond timed out after
    3s``) its count and its first episode's row and detail, the most frequent kind first."""
    kinds: dict[str, list[Episode]] = {}
    for e in failed:
        kinds.setdefault(str(e.failed).split(": ", 1)[0], []).append(e)
    parts = []
    for kind, members in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        first = members[0]
        detail = str(first.failed).split(": ", 1)[1:]
        said = f": {detail[0][:200]}" if detail else ""
        parts.append(f"{kind} x{len(members)} (first: row {first.prompt_index}{said})")
    return (
        f"step {step}: {len(failed)} of {total} episodes of environment {environment!r} failed "
        f"(left out of the step): {', '.join(parts)}"
    )


def episode_limits(config: RunConfig, tokenizer: Any) -> EpisodeLimits:
    """The limits of ``config``'s environment entry (its token budget resolved; the tool-call
    format read from ``tokenizer``'s chat template when ``auto``)."""
    entry = config.environment
    assert entry is not None  # a multi-turn config has an environment entry
    template = getattr(tokenizer, "chat_template", None)
    return EpisodeLimits(
        max_turns=entry.max_turns,
        max_tokens=entry.max_episode_tokens
        or entry.max_turns * config.training.max_completion_length,
        turn_timeout=entry.turn_timeout,
        episode_timeout=entry.episode_timeout,
        tool_call_format=tool_call_format(template, entry.tool_call_format),
    )


def episode_runner(
    config: RunConfig,
    host: Any,
    run: RunInfo,
    generator: Generator,
    prompts: PromptSet,
    eos_ids: Sequence[int],
    environment: EnvironmentImpl | None = None,
) -> EpisodeRunner:
    """The runner of ``config``'s multi-turn episodes over ``prompts`` (training's and the
    evaluation's). ``environment``: one already built (None: built
    from ``host``'s record and the entry's params). Close it after use (its event loop)."""
    entry = config.environment
    assert entry is not None  # a multi-turn config has an environment entry
    record = host.environments[entry.name]
    if environment is None:
        environment = build_environment(record, entry.params, run)
    return EpisodeRunner(
        environment=environment,
        environment_name=entry.name,
        generator=generator,
        tokenizer=prompts.tokenizer,
        prompts=prompts,
        limits=episode_limits(config, prompts.tokenizer),
        max_turn_tokens=config.training.max_completion_length,
        eos_ids=eos_ids,
        template_kwargs=dict(getattr(prompts.data, "chat_template_kwargs", None) or {}),
        reward_weights=dict(entry.reward_weights),
        declared_rewards=record.rewards(entry.params),
    )


__all__ = [
    "Episode",
    "EpisodeLimits",
    "EpisodeRunner",
    "episode_limits",
    "episode_runner",
    "failure_summary",
]
