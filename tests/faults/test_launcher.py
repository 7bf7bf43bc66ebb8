"""Ranks die with their launcher (fault campaign, rlvr #35 item 11): after ``kill -9`` of
``rlvr train --nproc-per-node 2`` or of ``torchrun``, both ranks used to train on to the end,
writing checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_run import write_config

from rlvr.outputs.checkpoint import list_checkpoints

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                out[int(entry.name)] = int(fields[1])
    return out


def _descendants(pid: int) -> set[int]:
    parents, found, todo = _parents(), set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p} - found
        found |= kids
        todo += kids
    return found


def _alive(pids: set[int]) -> set[int]:
    return pids & set(_parents())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("launcher", ["rlvr", "torchrun"])
def test_killing_the_launcher_ends_both_ranks(launcher, tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    config = write_config(
        tmp_path, tiny_model_dir, out, max_steps=500, save_steps=1, per_device_train_batch_size=1
    )
    if launcher == "rlvr":
        cmd = [sys.executable, "-m", "rlvr", "train", str(config), "--nproc-per-node", "2"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node=2", "-m", "rlvr", "train", str(config)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not list_checkpoints(out):  # both ranks are training
            assert proc.poll() is None, proc.stderr.read().decode()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint in 240 s"
            time.sleep(0.2)
        family |= _descendants(proc.pid)
        assert len(family) >= 2, family  # the two ranks (and torchrun, when it is a child)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(family), f"still running after the launcher died: {_alive(family)}"
        saved = [p.name for p in list_checkpoints(out)]
        time.sleep(3)
        assert [p.name for p in list_checkpoints(out)] == saved
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
        for pid in _alive(family | _descendants(proc.pid)):  # orphans of a failed test
            os.kill(pid, signal.SIGKILL)
