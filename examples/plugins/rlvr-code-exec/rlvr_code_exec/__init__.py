"""A third-party rlvr reward: run the completion's code against the row's tests.

``code_exec`` extracts the last ```python block of the completion, appends the row's test code
(``row[tests_field]``: a string, or a list of lines such as MBPP's ``test_list``) and runs the
program with ``python -I`` in a fresh temporary directory, in its own process group, with a
wall-clock limit (``timeout_seconds``, the whole group is killed after it), a CPU-time limit
and an address-space limit (``memory_mb``, ``RLIMIT_AS`` set by ``preexec_fn``). Exit status 0
scores ``pass_score``; anything else (failed assert, exception, timeout, out of memory, no code
block) scores ``fail_score``.

Not a sandbox: the program can read and write what your user can. Use a container for
untrusted code.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
from typing import Any

from pydantic import Field

from rlvr import Params, Reward, Sample, hookimpl

_BLOCK = re.compile(r"```(?:python|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


class CodeExecParams(Params):
    tests_field: str = Field("tests", min_length=1, description="row field with the test code")
    timeout_seconds: float = Field(5.0, gt=0, le=600, description="wall-clock limit")
    memory_mb: int = Field(512, ge=64, description="address-space limit of the program (MiB)")
    pass_score: float = Field(1.0, description="score when the program exits with status 0")
    fail_score: float = Field(0.0, description="score otherwise (or when there is no code)")
    python: str | None = Field(None, description="interpreter (default: the one running rlvr)")


def last_python_block(text: str) -> str | None:
    """The code of the last ```python (or ```py) block, or None."""
    blocks = _BLOCK.findall(text)
    return blocks[-1] if blocks else None


def _limits(memory_mb: int, cpu_seconds: int):
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def run_program(code: str, params: CodeExecParams) -> int | None:
    """Run ``code`` with the limits; its exit status, or None when it timed out."""
    with tempfile.TemporaryDirectory(prefix="rlvr-code-exec-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code)
        proc = subprocess.Popen(
            [params.python or sys.executable, "-I", path],
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"},
            start_new_session=True,  # its own process group: killed whole on timeout
            preexec_fn=_limits(params.memory_mb, math.ceil(params.timeout_seconds) + 1),
        )
        try:
            return proc.wait(timeout=params.timeout_seconds)
        except subprocess.TimeoutExpired:
            return None
        finally:
            with contextlib.suppress(ProcessLookupError):  # the program and its children
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class CodeExec:
    """``pass_score`` when the completion's code passes the row's tests, else ``fail_score``."""

    def __init__(self, params: CodeExecParams) -> None:
        self.params = params

    def __call__(self, sample: Sample) -> float:
        p = self.params
        code = last_python_block(sample.completion)
        if code is None:
            return p.fail_score
        tests: Any = sample.row[p.tests_field]
        if isinstance(tests, list | tuple):
            tests = "\n".join(str(t) for t in tests)
        status = run_program(f"{code}\n\n{tests}\n", p)
        return p.pass_score if status == 0 else p.fail_score


def _fields(params: CodeExecParams) -> tuple[str, ...]:
    return (params.tests_field,)


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="code_exec",
            params=CodeExecParams,
            factory=CodeExec,
            description="run the last ```python block with the row's tests (time/memory limits)",
            fields=_fields,
        )
    )


@hookimpl
def rlvr_validate_config(config):
    """rlvr's per-call deadline (the entry's ``timeout``) must leave the program its time."""
    problems = []
    for i, entry in enumerate(getattr(config, "rewards", None) or []):
        params = getattr(entry, "params", None)
        if entry.name != "code_exec" or not isinstance(params, CodeExecParams):
            continue
        if entry.timeout < params.timeout_seconds + 1:
            problems.append(
                (
                    f"rewards[{i}].timeout",
                    f"{entry.timeout:g}s would cut off a program allowed timeout_seconds = "
                    f"{params.timeout_seconds:g}s; set it to at least "
                    f"{params.timeout_seconds + 1:g}",
                )
            )
    return problems
