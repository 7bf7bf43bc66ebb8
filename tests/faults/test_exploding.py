"""#35 item 3: exploding weights were saved as the checkpoint to resume from. ``learning_rate:
.inf`` passed validation, step 1 turned every weight to inf unflagged, step 2 crashed in
sampling and the crash handler saved checkpoint-1 with those weights ("continue with
--resume"); ``1e10`` did the same with finite garbage."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli.main import main
from rlvr.outputs.checkpoint import list_checkpoints


@pytest.mark.parametrize("value", [".inf", "1e10", "2.0"])
def test_an_absurd_learning_rate_is_a_config_error(write_run, capsys, value):
    assert (
        main(
            [
                "validate",
                "--allow-code",
                str(write_run()),
                "--set",
                f"training.learning_rate={value}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "  training.learning_rate: " in err, err
    assert f"(from --set training.learning_rate={value})" in err


def test_the_value_models_learning_rate_must_be_finite(write_run, capsys):
    sets = ["algorithm.name=ppo", "algorithm.params.value_learning_rate=.inf"]
    assert (
        main(
            ["validate", "--allow-code", str(write_run()), *(x for s in sets for x in ("--set", s))]
        )
        == 2
    )
    assert "algorithm.params.value_learning_rate: " in capsys.readouterr().err


def test_sgd_takes_a_large_learning_rate_with_a_warning(write_run, capsys):
    # SGD's step is lr x the (clipped) gradient, not about lr per weight as Adam's: lr 2 can be
    # a real choice there, 1e10 cannot, and the update check below stops that one at step 1.
    config = str(write_run())
    assert (
        main(
            [
                "validate",
                "--allow-code",
                config,
                "--set",
                "training.optim=sgd",
                "--set",
                "training.learning_rate=2",
            ]
        )
        == 0
    )
    assert "warning: training.learning_rate: 2" in capsys.readouterr().err


def _all_finite(checkpoint) -> bool:
    weights = load_file(str(checkpoint / "model.safetensors"))
    return all(bool(torch.isfinite(t).all()) for t in weights.values())


@pytest.mark.parametrize(
    ("optim", "lr"), [("adamw_torch", "1.0"), ("sgd", "1e10")], ids=["adamw-1", "sgd-1e10"]
)
def test_an_exploding_update_stops_the_run_and_is_never_saved(write_run, capsys, optim, lr):
    # Step 1 trains at lr 0 (the warm-up's first step) and is saved; step 2's update blows
    # the weights up: the run stops with an error line, checkpoint-1 stays the latest.
    config = write_run(
        training={
            "optim": optim,
            "learning_rate": float(lr),
            "lr_scheduler_type": "constant_with_warmup",
            "warmup_steps": 1,
            "max_steps": 3,
            "save_steps": 1,
        }
    )
    assert main(["train", "--allow-code", str(config)]) == 1
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert "step 2: the update" in line and "training.learning_rate" in line
    assert "checkpoint-1" in line and "Traceback" not in err
    out = config.parent / "out"
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1"]
    assert _all_finite(out / "checkpoint-1")


#: The run of the next test, in a child process: on CUDA, sampling from inf logits is a
#: device-side assert that leaves the process's CUDA context unusable, so it must not share a
#: process with the tests after it.
CORRUPTING_RUN = """
import math, sys
import torch
from rlvr.cli.main import main
from rlvr.training.update import PolicyUpdate

original = PolicyUpdate.update

def corrupting(self, batch, first):
    result = original(self, batch, first)
    with torch.no_grad():
        next(self.policy.parameters()).fill_(math.inf)
    return result

PolicyUpdate.update = corrupting
try:
    main(["train", "--allow-code", sys.argv[1]])
except RuntimeError as exc:  # sampling from inf logits: the original error
    print("crashed:", type(exc).__name__, file=sys.stderr)
    sys.exit(7)
"""


def test_the_crash_handler_never_saves_non_finite_weights(write_run, tmp_path):
    # Weights that turned non-finite some way the update check did not see (here: set by
    # hand after step 1's update): step 2 then crashes in sampling, and the crash handler,
    # which saves the last finished step, must not save them as checkpoint-1.
    config = write_run(training={"max_steps": 3})
    script = tmp_path / "corrupting_run.py"
    script.write_text(CORRUPTING_RUN)
    done = subprocess.run(
        [sys.executable, str(script), str(config)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 7, done.stderr[-3000:]
    if torch.cuda.is_available():
        # After a device-side assert no CUDA call works, the weights check included: the
        # handler's save fails and says so, and nothing is written either way.
        assert "could not save a checkpoint at step 1" in done.stderr, done.stderr[-3000:]
    else:
        assert "not saving checkpoint-1: the trained weights are not finite" in done.stderr, (
            done.stderr[-3000:]
        )
    assert list_checkpoints(config.parent / "out") == []
