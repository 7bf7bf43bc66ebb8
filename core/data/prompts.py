"""Prompts for training: load the rows, check the fields the rewards need, build and tokenise
prompts, and hand them out in a deterministic, resumable order.

- :func:`load_rows`: the rows of the configured data source (a plugin: a file, a hub dataset,
  a reasoning-gym task, any installed source), as a list of dicts (every field of a row
  later reaches the rewards);
  :func:`dataset_rows` the same for a dataset in memory (``rlvr.Trainer(dataset=...)``).
- :func:`check_fields` / :func:`require_fields`: rows lacking a field that the prompt or a
  configured reward needs, reported before any model loads.
- :class:`PromptSet`: the prompt text of each row (system prompt, chat template or plain text)
  and its token ids, left-truncated to ``max_prompt_length``, built lazily.
- :class:`PromptSampler`: a seeded permutation per epoch; its whole state is one integer
  (prompts handed out so far), saved in checkpoints.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.config.sections import data_source_entry

logger = logging.getLogger("rlvr.data.prompts")


class DataError(RlvrError, ValueError):
    """The dataset cannot be used as configured (missing fields, no rows, bad prompts)."""


# --------------------------------------------------------------------------- loading


def load_rows(data: Any, host: Any, *, split: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``data`` (a :class:`rlvr.config.schema.DataConfig`) as a list of dicts:
    split ``split`` (default ``data.split``) of the data source ``data.source`` names, or that a
    shorthand stands for (``data.path``: ``file``, ``data.reasoning_gym``: ``reasoning_gym``),
    found in ``host``. ``data.max_samples`` keeps the first N rows.

    A source returns a list of dicts or a ``datasets.Dataset``. Its :class:`RlvrError` (a bad
    row, a missing file) becomes a :class:`DataError` with
    its message; any other exception one that names the source."""
    split = split or data.split
    name, params, _ = data_source_entry(data)
    if name is None:
        raise DataError(
            "data.path is not set: give a .json/.jsonl/.parquet file, a directory of them or a "
            "hub dataset name (or data.source: a data source plugin)"
        )
    record = host.data_sources.get(name)
    if record is None:
        raise DataError(host.unknown_message("data_source", name))
    if isinstance(params, dict):  # a shorthand (or a config made in Python): validated now
        params = record.params.model_validate(params)
    try:
        rows = record.factory(params, split)
    except RlvrError as exc:
        raise DataError(str(exc)) from None
    except Exception as exc:  # a plugin's bug or an unexpected failure: one line, its source
        raise DataError(
            f"data source {name!r} (split {split!r}) failed: {type(exc).__name__}: {exc}"
        ) from exc
    if data.max_samples is not None:
        rows = _first(rows, data.max_samples)
    if callable(getattr(rows, "to_list", None)):  # a datasets.Dataset
        rows = rows.to_list()
    rows = list(rows)
    if not rows:
        raise DataError(f"{data_source(data, split)} (split {split!r}) has no rows")
    return rows


def _first(rows: Any, n: int) -> Any:
    """The first ``n`` rows: of a ``datasets.Dataset`` by ``select`` (only those are read into
    memory, as a hub dataset can be large), else by slicing."""
    if callable(getattr(rows, "select", None)):
        return rows.select(range(min(n, len(rows))))
    return rows[:n]


def data_source(data: Any, split: str | None = None) -> str:
    """How errors name the data ``data`` describes: ``data.path 'x.jsonl'``, the task, or the
    data source."""
    rg = getattr(data, "reasoning_gym", None)
    if rg is not None:
        return f"reasoning-gym task {rg.task!r} [{split or data.split}]"
    if data.source is not None:
        return f"data source {data.source!r} [{split or data.split}]"
    return f"data.path {data.path!r}"


def dataset_rows(
    dataset: Any, *, what: str = "dataset", max_samples: int | None = None
) -> list[dict[str, Any]]:
    """The rows of a dataset in memory: a ``datasets.Dataset`` or a sequence of mappings (one
    per row), as :func:`load_rows` returns them; ``max_samples`` keeps the first N. ``what``
    names the argument in errors."""
    if isinstance(dataset, Mapping):  # a DatasetDict is a dict of splits
        splits = ", ".join(repr(k) for k in list(dataset)[:5])
        raise DataError(
            f"{what} is a mapping (keys {splits}), not a list of rows; pass one split, e.g. "
            f"{what}=ds['train']"
        )
    to_list = getattr(dataset, "to_list", None)
    if callable(to_list):  # datasets.Dataset
        rows = to_list()
    elif isinstance(dataset, Sequence) and not isinstance(dataset, str | bytes):
        rows = list(dataset)
    else:
        raise DataError(
            f"{what} must be a datasets.Dataset or a list of dicts, got {type(dataset).__name__} "
            "(datasets.Dataset.from_list, from_pandas and load_dataset(...)['train'] make one)"
        )
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise DataError(
                f"{what}[{i}] is a {type(row).__name__}, not a row; each row is a mapping of "
                'columns, e.g. {"prompt": "...", "answer": "..."}'
            )
    rows = [dict(row) for row in rows[:max_samples]]
    if not rows:
        raise DataError(f"{what} has no rows")
    return rows


# --------------------------------------------------------------------------- field checks


def _missing(rows: Sequence[Mapping[str, Any]], field: str) -> int:
    return sum(1 for row in rows if row.get(field) is None)


def check_fields(
    rows: Sequence[Mapping[str, Any]],
    entries: Sequence[Any],
    host: Any,
    *,
    prompt_field: str | None = None,
    guide_field: str | None = None,
) -> list[str]:
    """Problems with ``rows`` for the configured rewards (``entries``), one line each."""
    return [
        msg
        for _, msg in field_problems(
            rows, entries, host, prompt_field=prompt_field, guide_field=guide_field
        )
    ]


def field_problems(
    rows: Sequence[Mapping[str, Any]],
    entries: Sequence[Any],
    host: Any,
    *,
    prompt_field: str | None = None,
    guide_field: str | None = None,
) -> list[tuple[str, str]]:
    """``(config path, problem)`` for each field the prompt or a reward needs and ``rows`` lack.

    A row lacks a field when it has no such key or its value is None. Each reward's needed
    fields come from its record's ``fields(params)``; ``prompt_field`` and ``guide_field``
    (``training.guidance.field``) are checked too.
    """
    problems: list[tuple[str, str]] = []
    total = len(rows)
    columns = sorted({k for row in rows[:1000] for k in row})
    shown = ", ".join(columns) or "none"

    def report(path: str, field: str, who: str) -> None:
        n = _missing(rows, field)
        if n == total:
            problems.append(
                (path, f"field {field!r} needed by {who} is not in the dataset (columns: {shown})")
            )
        elif n:
            problems.append(
                (path, f"field {field!r} needed by {who} is missing in {n} of {total} rows")
            )

    if prompt_field is not None:
        report("data.prompt_field", prompt_field, "the prompt (data.prompt_field)")
        bad = [i for i, row in enumerate(rows) if not _is_prompt(row.get(prompt_field, ""))]
        if bad:
            value = rows[bad[0]][prompt_field]
            problems.append(
                (
                    "data.prompt_field",
                    f"field {prompt_field!r} (the prompt) must hold text or a list of "
                    f"{{role, content}} messages, but {len(bad)} of {total} rows hold something "
                    f"else (row {bad[0]}: {type(value).__name__} {str(value)[:40]!r})",
                )
            )
    if guide_field is not None:
        report("training.guidance.field", guide_field, "training.guidance")
    for i, entry in enumerate(entries):
        record = host.rewards.get(entry.name)
        if record is None:
            continue  # config validation reports unknown rewards
        for field in record.fields(entry.params):
            report(f"rewards[{i}]", field, f"reward {entry.key!r} (rewards[{i}])")
    return problems


def require_fields(
    rows: Sequence[Mapping[str, Any]],
    entries: Sequence[Any],
    host: Any,
    *,
    prompt_field: str | None = None,
    guide_field: str | None = None,
    source: str = "the dataset",
) -> None:
    """Raise :class:`DataError` listing every problem :func:`check_fields` finds."""
    problems = check_fields(rows, entries, host, prompt_field=prompt_field, guide_field=guide_field)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise DataError(
            f"{source} cannot be used with this config:\n{lines}\n"
            "Fix the data, set data.prompt_field, or point the reward at another field "
            "through its params."
        )


# --------------------------------------------------------------------------- prompts


def use_chat_template(data: Any, tokenizer: Any) -> bool:
    """Whether prompts go through the tokenizer's chat template: ``data.chat_template``, or
    (null) whenever the tokenizer has one, plain strings included, where TRL sends a plain
    string as plain text (:func:`plain_string_warning` says so)."""
    has = getattr(tokenizer, "chat_template", None) is not None
    if data.chat_template is None:
        return has
    if data.chat_template and not has:
        raise DataError(
            "data.chat_template is true but the tokenizer has no chat template; set "
            "data.chat_template: false to use plain-text prompts"
        )
    return bool(data.chat_template)


def _is_prompt(value: Any) -> bool:
    """Whether ``value`` can be a prompt (:func:`format_prompt`); None (missing) is reported as
    missing, not here."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value)


def _messages(value: Any, system: str | None, few_shot: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Chat messages from a prompt field: a string, or a list of ``{role, content}``; the
    few-shot turns go after the system message, so a small model sees its answer form acted
    out rather than described."""
    if isinstance(value, str):
        messages = [{"role": "user", "content": value}]
    elif isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value):
        messages = [dict(m) for m in value]
    else:
        raise DataError(
            f"a prompt must be a string or a list of {{role, content}} messages, got "
            f"{type(value).__name__}: {str(value)[:80]!r}"
        )
    if system is not None and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system})
    start = 1 if messages and messages[0].get("role") == "system" else 0
    messages[start:start] = [m for shot in few_shot for m in shot.turns()]
    return messages


def format_prompt(row: Mapping[str, Any], data: Any, tokenizer: Any, chat: bool) -> str:
    """The text the model is prompted with for ``row``."""
    value = row.get(data.prompt_field)
    if chat:
        messages = _messages(value, data.system_prompt, getattr(data, "few_shot", ()))
        kwargs = getattr(data, "chat_template_kwargs", None) or {}
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        )
    if isinstance(value, list):  # messages without a chat template: join their contents
        value = "\n\n".join(str(m.get("content", "")) for m in _messages(value, None))
    elif not isinstance(value, str):
        raise DataError(
            f"prompt field {data.prompt_field!r} must hold text, got {type(value).__name__}"
        )
    parts = [data.system_prompt] if data.system_prompt is not None else []
    parts += [
        "\n".join(str(m["content"]) for m in shot.turns()) for shot in getattr(data, "few_shot", ())
    ]
    return "\n\n".join([*parts, value])


def prompt_messages(row: Mapping[str, Any], data: Any) -> list[dict[str, Any]]:
    """The conversation the data config makes of ``row`` (its system prompt, then the prompt
    field as a user message, or the field's own messages): what an environment starts from."""
    return _messages(row.get(data.prompt_field), data.system_prompt, getattr(data, "few_shot", ()))


def plain_string_warning(rows: Sequence[Mapping[str, Any]], data: Any, chat: bool) -> str | None:
    """The warning for plain-string prompts sent through the chat template because
    ``data.chat_template`` is unset: rlvr's default, where TRL (its "standard" format) sends
    them as they are. None when the setting is explicit or the prompts are messages."""
    if not chat or data.chat_template is not None or not rows:
        return None
    if not isinstance(rows[0].get(data.prompt_field), str):
        return None
    return (
        f"data.chat_template is unset: the plain-string prompts ({data.prompt_field!r}) go "
        "through the tokenizer's chat template, where TRL sends them as plain text; set "
        "data.chat_template: true to keep this (and silence this warning), or false for TRL's "
        "behaviour"
    )


def warn_plain_strings(rows: Sequence[Mapping[str, Any]], data: Any, chat: bool) -> None:
    """Warn :func:`plain_string_warning`'s warning, from this one place: ``rlvr validate``'s
    check and the run's prompts both call it, and Python shows a warning once per place."""
    warning = plain_string_warning(rows, data, chat)
    if warning is not None:
        warnings.warn(warning, ConfigWarning, stacklevel=1)


@dataclass
class Prompt:
    """One row ready for the backend: its text, token ids and the row itself."""

    text: str
    ids: list[int]
    row: dict[str, Any]
    truncated: bool


class PromptSet:
    """The rows with their prompts, formatted and tokenised on first use (then cached)."""

    def __init__(
        self, rows: list[dict[str, Any]], data: Any, tokenizer: Any, max_prompt_length: int | None
    ) -> None:
        self.rows = rows
        self.data = data
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.chat = use_chat_template(data, tokenizer)
        self._cache: dict[int, Prompt] = {}
        self._warned = False
        warn_plain_strings(rows, data, self.chat)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Prompt:
        prompt = self._cache.get(i)
        if prompt is None:
            prompt = self._cache[i] = self._build(i)
        return prompt

    def _build(self, i: int) -> Prompt:
        row = self.rows[i]
        text = format_prompt(row, self.data, self.tokenizer, self.chat)
        # A chat template writes its own special tokens (BOS etc.); plain text gets the
        # tokenizer's usual ones.
        ids = list(self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"])
        if not ids:
            raise DataError(f"row {i}: the prompt is empty after tokenisation")
        limit = self.max_prompt_length
        truncated = limit is not None and len(ids) > limit
        if limit is not None and truncated:
            full = len(ids)
            ids = ids[-limit:]  # keep the end: the question and the generation prompt
            if not self._warned:
                self._warned = True
                logger.warning(
                    "prompts longer than training.max_prompt_length=%d tokens are "
                    "left-truncated (first seen: row %d, %d tokens)",
                    limit,
                    i,
                    full,
                )
        return Prompt(text=text, ids=ids, row=row, truncated=truncated)


# --------------------------------------------------------------------------- order


class PromptSampler:
    """Row indices in a seeded order: each epoch is a permutation fixed by ``(seed, epoch)``.

    The state is ``position``, the number of prompts handed out so far, so an interrupted run
    resumes mid-epoch exactly where it stopped.
    """

    def __init__(self, size: int, *, seed: int, shuffle: bool = True, position: int = 0) -> None:
        if size < 1:
            raise DataError("the dataset has no rows")
        self.size = size
        self.seed = seed
        self.shuffle = shuffle
        self.position = position
        self._perm: tuple[int, np.ndarray] | None = None

    @property
    def epoch(self) -> int:
        return self.position // self.size

    def _order(self, epoch: int) -> np.ndarray:
        if self._perm is None or self._perm[0] != epoch:
            if self.shuffle:
                order = np.random.default_rng([self.seed, epoch]).permutation(self.size)
            else:
                order = np.arange(self.size)
            self._perm = (epoch, order)
        return self._perm[1]

    def take(self, k: int) -> list[int]:
        """The next ``k`` row indices (crossing into the next epoch when needed)."""
        out: list[int] = []
        for _ in range(k):
            epoch, i = divmod(self.position, self.size)
            out.append(int(self._order(epoch)[i]))
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "size": self.size, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if state.get("size", self.size) != self.size:
            logger.warning(
                "the dataset has %d rows but the checkpoint was taken with %d; the prompt "
                "order after resuming differs from the original run",
                self.size,
                state["size"],
            )
        self.position = int(state["position"])


__all__ = [
    "DataError",
    "Prompt",
    "PromptSampler",
    "PromptSet",
    "check_fields",
    "data_source",
    "dataset_rows",
    "format_prompt",
    "load_rows",
    "plain_string_warning",
    "prompt_messages",
    "require_fields",
    "use_chat_template",
]
