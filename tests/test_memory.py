"""A training step hands the heap memory it freed back to the OS (glibc's ``malloc_trim``).

Without it the resident memory of a CPU run crept up step after step, because glibc keeps the
pages of freed activations (docs/performance/how-a-step-stays-fast.md, "Freed memory goes
back").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# test_trainer's fixtures: the tiny model, its dataset, a host, a config builder.
from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import run  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

import rlvr.model.loading  # noqa: E402
from rlvr.training import memory  # noqa: E402

glibc = pytest.mark.skipif(
    memory.malloc_trim() is None, reason="this C library has no malloc_trim (glibc only)"
)


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@glibc
def test_freed_heap_pages_go_back_to_the_os():
    # 4,000 tensors of 64 KiB (under glibc's mmap threshold: they live on the heap), touched;
    # the last one stays alive, so the freed ones sit below it and a plain free() keeps them.
    blocks = [torch.ones(16_384) for _ in range(4_000)]
    last = blocks[-1]
    del blocks
    held = resident_mib()
    memory.return_freed_memory()
    returned = held - resident_mib()
    assert returned > 150, f"only {returned:.0f} MiB of about 250 went back"
    assert last.sum() == 16_384


def test_every_step_returns_freed_memory(make_config, host, monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "return_freed_memory", lambda: calls.append(1))
    run(make_config(max_steps=3), host)
    assert len(calls) == 3


def test_training_caps_onednn_cache_unless_the_user_chose(make_config, host, monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    run(make_config(max_steps=1, output="first"), host)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(memory.ONEDNN_CACHE_CAPACITY)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
    run(make_config(max_steps=1, output="second"), host)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"


SHAPES = """
import ctypes, os, sys, torch
import rlvr.training.memory
if sys.argv[1] == "rlvr":
    rlvr.training.memory.cap_onednn_cache()
torch.set_num_threads(1)
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
w = torch.randn(1536, 576, dtype=torch.bfloat16)
start = resident()
for m in range(1, 900):  # a new token count, so new primitives, as in every training step
    x = torch.randn(m, 576, dtype=torch.bfloat16, requires_grad=True)
    torch.nn.functional.linear(x, w).sum().backward()
ctypes.CDLL(None).malloc_trim(0)
print(resident() - start)
"""


@glibc
@pytest.mark.skipif(
    not rlvr.model.loading.cpu_computes_bfloat16(),
    reason="bfloat16 runs through oneDNN's compiled primitives only on AVX512-BF16/AMX CPUs",
)
def test_the_capped_onednn_cache_holds_less_memory():
    """900 bfloat16 matmul shapes: oneDNN's default cache keeps them all, rlvr's cap 256."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    grew = {}
    for who in ("onednn", "rlvr"):
        out = subprocess.run(
            [sys.executable, "-c", SHAPES, who], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        grew[who] = float(out.stdout)
    assert grew["onednn"] - grew["rlvr"] > 100, grew
