"""Reward factories for tests/test_pool.py, at module level so worker processes can import them.

Each factory takes ``params`` and returns the reward callable, like a real plugin's factory.
"""

from __future__ import annotations

import ctypes
import os
import time


def _answer(sample):
    return sample.row.get("answer")


def length(params):
    """A trivial reward: the completion's length times ``params`` (default 1)."""
    scale = 1.0 if params is None else params

    def reward(sample):
        return len(sample.completion) * scale

    return reward


def echo(params):
    """Returns ``sample.row["value"]`` as is: any object, to test what the pool accepts."""
    return lambda sample: sample.row.get("value")


def misbehave(params):
    """Behaves by the completion: "ok" -> 1.0, "sleep", "spin", "exit", "segv", "raise"."""

    def reward(sample):
        what = sample.completion
        if what == "sleep":
            time.sleep(3600)
        elif what == "spin":
            while True:
                pass
        elif what == "exit":
            os._exit(1)
        elif what == "segv":
            ctypes.string_at(0)
        elif what == "raise":
            raise ValueError(f"bad sample {what!r}")
        elif what == "memory":
            raise MemoryError("out of memory")
        return 1.0

    return reward


def math_verify_no_timeout(params):
    """math-verify with its own timeouts disabled: ``10^{10^{8}}`` freezes it holding the GIL."""
    from math_verify import parse, verify

    def reward(sample):
        gold = parse(f"${_answer(sample)}$", parsing_timeout=None)
        pred = parse(sample.completion, parsing_timeout=None)
        return float(verify(gold, pred, timeout_seconds=None))

    return reward


def failing_factory(params):
    """Building fails."""
    raise RuntimeError("cannot build this reward")


def crashing_factory(params):
    """Building kills the worker process."""
    os._exit(3)


def slow_factory(params):
    """Building takes ``params`` seconds."""
    time.sleep(params)
    return lambda sample: 2.0


def raises_on_four(params):
    """Raises (always the same error) when the row's answer is "4", else returns 1."""

    def reward(sample):
        if sample.row.get("answer") == "4":
            raise ValueError("no rule for answer 4")
        return 1.0

    return reward


def batch_misbehave(params):
    """A batched reward: each sample's completion length plus the batch size / 100 (so the
    batch it was scored in shows), logging a column and a metric; a batch holding "raise",
    "sleep", "exit", "short" or "bad" raises, hangs, kills the worker, returns one value too
    few, or returns a string for that sample."""
    from rlvr.plugin import BatchOutput

    def reward(samples):
        texts = [s.completion for s in samples]
        if "raise" in texts:
            raise ValueError("bad batch")
        if "sleep" in texts:
            time.sleep(3600)
        if "exit" in texts:
            os._exit(1)
        values = ["oops" if t == "bad" else len(t) + len(samples) / 100 for t in texts]
        if "short" in texts:
            values = values[:-1]
        return BatchOutput(
            values, columns={"size": [len(samples)] * len(samples)}, metrics={"calls": [1.0]}
        )

    return reward
