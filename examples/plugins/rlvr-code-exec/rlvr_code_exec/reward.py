"""The ``code_exec`` reward, imported by its ``LazyFactory`` when a run builds it."""

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

from rlvr.plugin import Sample
from rlvr_code_exec.params import CodeExecParams

_BLOCK = re.compile(r"```(?:python|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


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
