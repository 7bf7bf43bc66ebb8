"""``callable``: use a TRL-style reward function as it is, without rewriting it.

TRL's ``GRPOTrainer`` (1.16) calls each reward function on a batch as
``fn(prompts=[...], completions=[...], completion_ids=[[int, ...], ...], **columns,
trainer_state=..., log_extra=..., log_metric=...)`` (every dataset column but
``prompt``/``completion``/``completion_ids`` as a list) and expects a list with one float or
``None`` per completion. This reward imports such a function and calls it exactly that way,
inside rlvr's reward workers, on the batch TRL's call would see::

    rewards:
      - name: callable
        params:
          function: my_rewards:correctness_reward_func      # module:function
          kwargs: {bonus: 0.5}                              # extra keyword arguments
      - name: callable
        label: strict_format
        params: {function: "rewards/format.py:strict_format_reward_func"}   # file:function

- ``function`` is ``"module:function"`` (a module importable from ``sys.path`` or the current
  directory, e.g. ``my_pkg.rewards:accuracy``) or ``"path/to/file.py:function"`` (a relative
  path resolves against the config file's directory, or the current directory when given with
  ``--set``). The part
  after ``:`` may be a dotted attribute (``module:Class.method``).
- ``format`` follows TRL's dataset formats: ``standard`` passes the prompt text and the
  completion text; ``conversational`` passes message lists (``prompts=[[{role, content},
  ...]]``, ``completions=[[{"role": "assistant", "content": text}]]``); ``auto`` (default) is
  conversational when the row's ``prompt`` is a list of messages, as TRL decides.
- ``kwargs`` are passed on every call and win over a dataset column of the same name.
- ``batch``: ``step`` (default) calls the function once on every completion scored together:
  in training all completions of a step's generation round on this rank (TRL scores a
  process's whole generation batch per call), in ``rlvr eval`` an eval batch; ``group`` once
  per prompt's completions. ``rlvr rewards score`` always calls it on the rows that share a
  prompt. The entry's ``timeout`` bounds one call, on the whole batch (a function that never
  returns costs one ``timeout``, not one per completion): raise it for a function whose batch
  takes longer, e.g. a judge asked about one completion at a time. A call that raises, times
  out or returns the wrong number of values gives every completion of the batch the
  ``fallback`` (each counts as an error).
- ``completion_ids`` are the sampled token ids of each completion (None when scoring a file of
  texts with ``rlvr rewards score``: there are no tokens).
- ``trainer_state`` has ``global_step`` (optimizer steps done: 0 while the first step is
  scored, as in TRL), ``epoch`` (passes over the prompts) and ``max_steps`` (all 0 outside
  training).
- ``log_extra(column, values)`` (one value per completion) adds a column to each sample's
  ``extra`` in ``samples.jsonl``; ``log_metric(name, value)`` adds the metric
  ``reward/<label>/<name>`` (averaged over the step's calls, as TRL averages).
- An ``async def`` function (or one returning an awaitable) is awaited.
- ``None`` means "not applicable": it adds nothing to the weighted sum; a completion for which
  every reward returns None is left out of its group's baseline and gets advantage 0 (TRL's
  rule).

Validation checks the form of ``function`` without running anything, and the config check
(the family's ``rlvr_validate_config``, :func:`check_function`) that the module or file exists
and, by reading its source, that it defines the function; the import itself happens in each
reward worker.

**This runs the code the config names**: the function is imported and executed with your
permissions, like any Python script you run. So the record declares it (``runs_code``) and a
config with a ``callable`` entry runs only with ``--allow-code`` on the command line
(``allow_code=True`` in Python). Only pass it for configs whose ``function`` you trust.
"""

from __future__ import annotations

from rlvr._builtin import call_trl_batch, check_function, load_function
from rlvr.plugin import BatchOutput, Sample
from rlvr.plugins.rewards.params import CallableParams


class CallableReward:
    """Calls the TRL-style function on a batch of samples (a :class:`rlvr.plugin.BatchRewardFn`)."""

    def __init__(self, params: CallableParams) -> None:
        self.params = params
        self.fn = load_function(params.function)

    def __call__(self, samples: list[Sample]) -> BatchOutput:
        p = self.params
        return call_trl_batch(self.fn, samples, format=p.format, kwargs=p.kwargs, name=p.function)


__all__ = [
    "CallableParams",
    "CallableReward",
    "check_function",
    "load_function",
]
