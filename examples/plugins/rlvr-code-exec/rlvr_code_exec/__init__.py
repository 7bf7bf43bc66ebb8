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

The package has the layout of rlvr's own plugin families: this module registers the plugin
(cheap: ``rlvr plugins`` imports it), ``params.py`` holds the params model and ``reward.py``
the reward, imported by its ``LazyFactory`` when a run builds it.
"""

from __future__ import annotations

from rlvr.plugin import LazyFactory, Reward, hookimpl
from rlvr_code_exec.params import CodeExecParams


def _fields(params: CodeExecParams) -> tuple[str, ...]:
    return (params.tests_field,)


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="code_exec",
            params=CodeExecParams,
            factory=LazyFactory("rlvr_code_exec.reward:CodeExec"),
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
