"""#35 item 1: the NaN guard crashed itself. A skipped step (non-finite loss) is logged with
``loss: null``, which the progress bar formatted with ``:.4f`` (TypeError), so the run died at
step 1 with nothing saved and ``max_bad_steps`` was never reached; a NaN or huge reward weight,
or a reward returning 1e308, led there."""

from __future__ import annotations

import json
from pathlib import Path

from rlvr.cli.main import main
from rlvr.outputs.checkpoint import list_checkpoints
from rlvr.outputs.metrics import read_metrics


def test_skipped_steps_are_logged_then_max_bad_steps_stops_with_a_checkpoint(
    write_run, monkeypatch, capsys
):
    from rlvr.algorithms.base import PolicyGradient
    from rlvr.api.runtime import LossOutput

    original = PolicyGradient.loss

    def nan_loss(self, *args, **kwargs):  # what a numerical blow-up in the loss looks like
        out = original(self, *args, **kwargs)
        return LossOutput(loss=out.loss * float("nan"), metrics=out.metrics)

    monkeypatch.setattr(PolicyGradient, "loss", nan_loss)
    config = write_run(training={"max_steps": 4, "max_bad_steps": 2, "report_to": "tensorboard"})
    # The command line: a progress bar (tqdm, even when it draws nothing), the step lines,
    # metrics.jsonl and tensorboard all get the skipped steps.
    assert main(["train", "--allow-code", str(config)]) == 1
    printed = capsys.readouterr()
    assert "error: 2 steps in a row had a non-finite loss" in printed.err
    assert "Traceback" not in printed.err
    assert (printed.out + printed.err).count("SKIPPED (non-finite)") == 2
    out = config.parent / "out"
    lines = read_metrics(out)
    assert [(m["step"], m["skipped"], m["loss"]) for m in lines] == [(1, 1, None), (2, 1, None)]
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]
    assert list((out / "tensorboard").glob("events.*"))


def test_reward_weights_and_fallbacks_must_be_finite_and_sane(write_run, capsys):
    config = str(write_run())
    for key, value in [
        ("rewards[0].weight", ".nan"),
        ("rewards[0].weight", "1e308"),
        ("rewards[0].weight", "-.inf"),
        ("rewards[0].fallback", ".nan"),
        ("rewards[0].fallback", "1e308"),
    ]:
        assert main(["validate", "--allow-code", config, "--set", f"{key}={value}"]) == 2, (
            key,
            value,
        )
        err = capsys.readouterr().err
        assert f"  {key}: " in err and f"(from --set {key}={value})" in err, err
    assert main(["validate", "--allow-code", config, "--set", "rewards[0].weight=-2.5"]) == 0
    capsys.readouterr()


def test_a_huge_reward_value_is_a_reward_error_not_a_crash(write_run, capsys):
    # Step 2 holds rows 2 and 3 (answers 4 and 5): the reward returns 1e308 on 4 of 8 calls,
    # which is the 0.5 max_reward_error_frac allows. Those calls get the fallback, are counted
    # and reported, and the run trains on.
    config = write_run(
        rewards=[
            {"name": "callable", "label": "digits", "params": {"function": "rewards.py:digits"}},
            {
                "name": "callable",
                "label": "huge",
                "fallback": -1.0,
                "params": {"function": "rewards.py:huge_on_five"},
            },
        ],
    )
    assert main(["train", "--allow-code", str(config)]) == 0
    printed = "".join(capsys.readouterr())
    assert "step 2: reward 'huge': 4 errors and 0 timeouts in 8 calls" in printed
    out = config.parent / "out"
    lines = read_metrics(out)
    assert [m["rewards/huge/errors"] for m in lines] == [0, 4]
    assert lines[1]["rewards/huge/mean"] == (4 * 1.0 + 4 * -1.0) / 8
    assert all(m["skipped"] == 0 and m["loss"] is not None for m in lines)
    (record,) = [json.loads(x) for x in (out / "reward_errors.jsonl").read_text().splitlines()]
    assert "1e+308" in record["error"] and record["row"]["answer"] == "5"
    assert [p.name for p in list_checkpoints(Path(out))] == ["checkpoint-2"]
