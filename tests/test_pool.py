"""rlvr.rewards.pool and rlvr.rewards.scoring: timeouts, crashes, bad values, order, weighting,
statistics."""

from __future__ import annotations

import gc
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# Whatever pytest's import mode, make tests/bad_rewards importable here and (through the
# parent's sys.path, which the pool hands on) in the worker processes.
sys.path.insert(0, str(Path(__file__).parent))

import bad_rewards as br  # noqa: E402

from rlvr.api.registration import Sample  # noqa: E402
from rlvr.rewards.pool import PoolResult, PoolSpec, RewardPool  # noqa: E402
from rlvr.rewards.scoring import RewardStats, ScoreEntry, Scorer, Scores, merge_summaries  # noqa: E402

TIMEOUT = 1.0
SLACK = 2.0  # allowed overhead beyond the timeout (kill, replacement start, the other calls)


def samples(*completions: str, **row) -> list[Sample]:
    return [Sample(completion=c, row=row) for c in completions]


@pytest.fixture(scope="module")
def pool():
    specs = [
        PoolSpec("bad", br.misbehave, None, timeout=TIMEOUT, fallback=-1.0),
        PoolSpec("len", br.length, 2.0, timeout=TIMEOUT, fallback=None),
    ]
    with RewardPool(specs, workers=2) as p:
        p.wait_ready()
        yield p


def timed_score(pool: RewardPool, batch: list[Sample]):
    start = time.monotonic()
    result = pool.score(batch)
    return result, time.monotonic() - start


def test_order_is_kept_with_several_workers(pool):
    batch = [Sample(completion="x" * (i % 13)) for i in range(500)]
    result = pool.score(batch)
    assert result.values["len"] == [2.0 * (i % 13) for i in range(500)]
    assert result.values["bad"] == [1.0] * 500
    assert result.timeouts == {"bad": 0, "len": 0}
    assert result.errors == {"bad": 0, "len": 0}


@pytest.mark.parametrize("what", ["sleep", "spin"])
def test_a_call_that_never_returns_times_out(pool, what):
    batch = samples("ok", what, *["ok"] * 20)
    result, elapsed = timed_score(pool, batch)
    assert elapsed < TIMEOUT + SLACK
    assert result.values["bad"] == [1.0, -1.0] + [1.0] * 20
    assert result.values["len"] == [4.0, 2.0 * len(what)] + [4.0] * 20
    assert result.timeouts == {"bad": 1, "len": 0}
    assert result.errors == {"bad": 0, "len": 0}


@pytest.mark.parametrize(("what", "message"), [("exit", "exit code 1"), ("segv", "SIGSEGV")])
def test_a_crash_is_an_error_and_the_rest_is_scored(pool, what, message):
    batch = samples("ok", what, *["ok"] * 20)
    result, elapsed = timed_score(pool, batch)
    assert elapsed < SLACK
    assert result.values["bad"] == [1.0, -1.0] + [1.0] * 20
    assert result.errors == {"bad": 1, "len": 0}
    assert result.timeouts == {"bad": 0, "len": 0}
    assert message in result.error_messages["bad"][0]


def test_exceptions_give_the_fallback_and_the_worker_goes_on(pool):
    result = pool.score(samples("raise", "ok", "memory", "raise"))
    assert result.values["bad"] == [-1.0, 1.0, -1.0, -1.0]
    assert result.errors["bad"] == 3
    # Each distinct error once; two workers may report them in either order.
    assert sorted(result.error_messages["bad"]) == [
        "MemoryError: out of memory",
        "ValueError: bad sample 'raise'",
    ]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_everything_at_once_with_one_worker(start_method):
    """The rest of a killed worker's chunk is sent again, to its replacement."""
    batch = samples("ok", "sleep", "ok", "exit", "raise", "spin", *["ok"] * 30)
    spec = PoolSpec("bad", br.misbehave, None, timeout=TIMEOUT, fallback=0.0)
    with RewardPool([spec], workers=1, start_method=start_method) as pool:
        pool.wait_ready()
        result, elapsed = timed_score(pool, batch)
    assert elapsed < 2 * TIMEOUT + 2 * SLACK
    assert result.values["bad"] == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0] + [1.0] * 30
    assert result.timeouts["bad"] == 2
    assert result.errors["bad"] == 2


def test_values_that_are_not_numbers_are_errors():
    values = ["0.5", math.nan, math.inf, [1.0], True, None, 3, 0.25]
    batch = [Sample(completion="", row={"value": v}) for v in values]
    spec = PoolSpec("echo", br.echo, None, timeout=5.0, fallback=-2.0)
    for workers in (0, 2):
        with RewardPool([spec], workers=workers) as pool:
            result = pool.score(batch)
        assert result.values["echo"] == [-2.0, -2.0, -2.0, -2.0, 1.0, None, 3.0, 0.25]
        assert result.errors["echo"] == 4
        # With 2 workers the messages arrive in completion order, not input order.
        messages = result.error_messages["echo"]
        assert any(m.startswith("reward 'echo' returned '0.5' (str)") for m in messages)
        assert any(m.startswith("reward 'echo' returned nan (float)") for m in messages)


def test_math_verify_without_timeouts_is_killed():
    spec = PoolSpec("mv", br.math_verify_no_timeout, None, timeout=2.0, fallback=0.0)
    batch = [
        Sample(completion="so \\boxed{100}", row={"answer": "100"}),
        Sample(completion="\\boxed{10^{10^{8}}}", row={"answer": "100"}),
        Sample(completion="it is \\boxed{7}", row={"answer": "7"}),
        Sample(completion="\\boxed{3}", row={"answer": "4"}),
    ]
    with RewardPool([spec], workers=2) as pool:
        pool.wait_ready()  # math-verify's import is not part of the deadline
        result, elapsed = timed_score(pool, batch)
    assert elapsed < 2.0 + SLACK
    assert result.values["mv"] == [1.0, 0.0, 1.0, 0.0]
    assert result.timeouts["mv"] == 1


@pytest.mark.parametrize(
    ("factory", "params", "message"),
    [
        (br.failing_factory, None, "RuntimeError: cannot build this reward"),
        (br.crashing_factory, None, "crashed the worker process (exit code 3)"),
        (br.slow_factory, 60, "timed out after 0.5s"),
    ],
)
def test_a_reward_that_cannot_be_built_gives_fallbacks(factory, params, message):
    specs = [
        PoolSpec("broken", factory, params, timeout=TIMEOUT, fallback=-1.0),
        PoolSpec("len", br.length, None, timeout=TIMEOUT, fallback=None),
    ]
    start = time.monotonic()
    with RewardPool(specs, workers=2, build_timeout=0.5) as pool:
        result = pool.score(samples("a", "bb", "ccc"))
        again = pool.score(samples("dddd"))
    assert time.monotonic() - start < 0.5 + 2 * SLACK
    assert result.values == {"broken": [-1.0] * 3, "len": [1.0, 2.0, 3.0]}
    assert result.errors["broken"] == 3
    assert message in result.error_messages["broken"][0]
    assert again.values == {"broken": [-1.0], "len": [4.0]}


def test_in_process_mode_catches_exceptions():
    spec = PoolSpec("bad", br.misbehave, None, timeout=TIMEOUT, fallback=0.5)
    with RewardPool([spec], workers=0) as pool:
        result = pool.score(samples("ok", "raise"))
    assert result.values["bad"] == [1.0, 0.5]
    assert result.errors["bad"] == 1


def test_bad_configuration_is_refused_at_once():
    with pytest.raises(ValueError, match="unique"):
        RewardPool([PoolSpec("a", br.length), PoolSpec("a", br.length)], workers=0)
    with pytest.raises(ValueError, match="fork"):
        RewardPool([PoolSpec("a", br.length)], start_method="fork")
    with pytest.raises(Exception, match="lambda"):
        RewardPool([PoolSpec("a", lambda params: len)], workers=1)


def test_closed_pool_refuses_work():
    pool = RewardPool([PoolSpec("len", br.length)], workers=1)
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.score(samples("a"))


def test_ctrl_c_interrupts_a_call_and_the_pool_recovers():
    spec = PoolSpec("bad", br.misbehave, None, timeout=60.0, fallback=0.0)
    with RewardPool([spec], workers=2) as pool:
        pool.wait_ready()

        def ctrl_c():  # what a terminal does: SIGINT to the parent and its workers
            for pid in [os.getpid()] + [w.proc.pid for w in pool._workers]:
                os.kill(pid, signal.SIGINT)

        # Python runs a signal's handler wherever the main thread is: inside an object's
        # __del__ (a cyclic collection of earlier tests' garbage) the KeyboardInterrupt is
        # printed and dropped, and the call would go on. Collect first, none during the call.
        gc.collect()
        gc.disable()
        # Ctrl-C raises KeyboardInterrupt only under Python's default handler: a test run
        # started in the background by a non-interactive shell inherits SIGINT ignored.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.3, ctrl_c).start()
        start = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                pool.score(samples("sleep", "ok"))
        finally:
            signal.signal(signal.SIGINT, previous)
            gc.enable()
        assert time.monotonic() - start < SLACK
        result = pool.score(samples("ok", "raise", "ok"))
    assert result.values["bad"] == [1.0, 0.0, 1.0]
    assert result.errors["bad"] == 1


WATCHED = """
import os, sys, time
sys.path[:0] = {path!r}
import bad_rewards as br
from rlvr.rewards.pool import PoolSpec, RewardPool
from rlvr.api.registration import Sample

if __name__ == "__main__":
    pool = RewardPool([PoolSpec("bad", br.misbehave, None, timeout=60.0)], workers=1)
    pool.wait_ready()
    print(pool._workers[0].proc.pid, flush=True)
    pool.score([Sample("spin")])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_their_parent(tmp_path):
    script = tmp_path / "watched.py"
    script.write_text(WATCHED.format(path=sys.path))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    time.sleep(0.3)  # the worker is spinning in its call
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(worker):
        time.sleep(0.05)
    assert not _running(worker)


def _running(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


UNGUARDED = """
import os, sys
sys.path[:0] = {path!r}
with open({log!r}, "a") as f:  # once per process that runs this script
    f.write(f"{{os.getpid()}}\\n")
import bad_rewards as br
from rlvr.rewards.pool import PoolSpec, RewardPool
from rlvr.api.registration import Sample
{factory}
with RewardPool([PoolSpec("len", {name}, None)], workers=2) as pool:
    print(pool.score([Sample("abc"), Sample("de")]).values["len"])
"""

IN_MAIN = """
def length(params):
    return br.length(params)
"""


@pytest.mark.parametrize(
    ("guarded", "factory", "name"),
    [(False, "", "br.length"), (True, IN_MAIN, "length")],
    ids=["unguarded script", "factory in __main__"],
)
def test_workers_run_a_script_only_when_its_rewards_live_there(tmp_path, guarded, factory, name):
    """A script without the `if __name__ == "__main__":` guard (a notebook saved as a file)
    would run again in every worker: the workers import it only for a factory defined there
    (which then needs the guard, as multiprocessing always does)."""
    log = tmp_path / "runs"
    code = UNGUARDED.format(path=sys.path, log=str(log), factory=factory, name=name)
    if guarded:
        head, _, body = code.partition("with RewardPool")
        code = (
            head
            + 'if __name__ == "__main__":\n    with RewardPool'
            + body.replace("\n    print", "\n        print")
        )
    script = tmp_path / "script.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[0] == "[3.0, 2.0]"
    runs = log.read_text().split()
    # the script itself; for a factory defined in __main__, again where the workers start
    assert len(runs) > 1 if guarded else len(runs) == 1, runs


def test_throughput_of_a_trivial_reward(pool):
    batch = samples(*["abc"] * 5000)
    result, elapsed = timed_score(pool, batch)
    assert result.values["len"] == [6.0] * 5000
    assert 10_000 / elapsed > 2_000  # calls per second; ~50,000 measured on 2 cores


# --------------------------------------------------------------------------- scoring


def test_weighted_total_counts_none_as_zero():
    entries = [
        ScoreEntry("len", br.length, None, weight=0.5),
        ScoreEntry("echo", br.echo, None, weight=-2.0, fallback=None),
    ]
    batch = [
        Sample(completion="abcd", row={"value": 1.0}),
        Sample(completion="ab", row={"value": None}),
        Sample(completion="", row={"value": "junk"}),
    ]
    with Scorer(entries, workers=1) as scorer:
        scores = scorer.score(batch)
    assert scores.total == [0.0, 1.0, 0.0]
    assert scores.per_reward == {"len": [4.0, 2.0, 0.0], "echo": [1.0, None, None]}
    summary = scores.summary()
    assert summary["echo"] == RewardStats(1.0, 0.0, none_count=2, timeouts=0, errors=1, count=3)
    assert summary["len"].mean == 2.0
    assert summary["len"].std == pytest.approx(math.sqrt(8 / 3))


def test_stats_of_nothing_are_nan():
    stats = RewardStats.of([None, None])
    assert math.isnan(stats.mean) and math.isnan(stats.std)
    assert (stats.none_count, stats.count) == (2, 2)


def test_merged_summaries_equal_the_summary_of_everything():
    batches = [[1.0, None, 3.0], [], [None], [-2.0, 0.5, 7.0, 7.0], [4.0]]
    parts = [
        Scores([], PoolResult(values={"r": b}, timeouts={"r": 1}, errors={"r": 2})).summary()
        for b in batches
    ]
    merged = merge_summaries(parts)["r"]
    expected = RewardStats.of([v for b in batches for v in b], timeouts=5, errors=10)
    assert merged.mean == pytest.approx(expected.mean)
    assert merged.std == pytest.approx(expected.std)
    assert (merged.none_count, merged.timeouts, merged.errors, merged.count) == (2, 5, 10, 9)
