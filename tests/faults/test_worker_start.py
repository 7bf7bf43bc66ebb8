"""#35 item 12: a directory named ``rlvr`` in the working directory broke every run: the reward
workers' forkserver (started as ``python -c``) had the current directory first on its sys.path
and imported that instead of rlvr (a clone's parent directory shadows an editable install; a
package of one's own named rlvr shadows any install). The run died with "reward workers fail
to start" as a traceback, the cause only in a child's traceback; now any failure to start is
one ``error:`` line that names the cause."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from rlvr.outputs.metrics import read_metrics

#: A program that starts rlvr, as the ``rlvr`` console script does (outside the working
#: directory, so the trainer itself never has the working directory on its sys.path).
CLI = textwrap.dedent(
    """
    import sys
    from rlvr.cli.main import main

    if __name__ == "__main__":
        sys.exit(main())
    """
)


def _train(script: Path, config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), "train", "--allow-code", str(config)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_directory_named_rlvr_in_the_working_directory_is_not_imported(write_run, tmp_path):
    config = write_run(training={"max_steps": 1})
    work = tmp_path / "work"
    (work / "rlvr").mkdir(parents=True)
    (work / "rlvr" / "__init__.py").write_text("# a package of one's own named rlvr\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cli.py").write_text(CLI)
    done = _train(tmp_path / "bin" / "cli.py", config, cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = read_metrics(config.parent / "out")
    assert line["rewards/callable/errors"] == 0 and line["skipped"] == 0


#: A program whose reward factory lives in its own ``__main__``, so the workers must import it
#: (as multiprocessing does), and which refuses to be imported.
STRICT = """
import sys
sys.path[:0] = {path!r}
if __name__ != "__main__":
    raise RuntimeError("this script runs only as the main program")
from rlvr.api.registration import Sample
from rlvr.rewards.pool import PoolSpec, RewardPool, RewardWorkerError


def length(params):
    return lambda sample: float(len(sample.completion))


try:
    with RewardPool([PoolSpec("len", length, None)], workers=1) as pool:
        pool.score([Sample("abc")])
except RewardWorkerError as exc:  # an RlvrError: the CLI prints it as one error: line
    print(exc)
    sys.exit(3)
"""


def test_workers_that_cannot_start_say_why_in_one_message(tmp_path):
    # A script that never imports as a module: the workers (which need its reward factory)
    # cannot start. Before, the cause was only in a child's traceback. (A script whose rewards
    # live elsewhere is no longer imported by the workers at all: tests/test_pool.py.)
    script = tmp_path / "strict.py"
    script.write_text(STRICT.format(path=sys.path))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stderr[-3000:]
    [message] = done.stdout.strip().splitlines()
    assert message.startswith("reward workers fail to start"), message
    assert "RuntimeError: this script runs only as the main program" in message
    assert str(script) in message and 'if __name__ == "__main__":' in message
