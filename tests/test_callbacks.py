"""Callbacks: plugins that observe a run and may stop it (``callbacks:``), the loggers of
``training.report_to`` (each a callback plugin), and ``transformers.TrainerCallback`` objects
given to ``rlvr.Trainer`` (#43 item 3)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.config.schema import ConfigError, load_config
from rlvr.outputs.metrics import read_metrics
from rlvr.training.callbacks import ReportError
from rlvr.training.launch import train

SECTIONS = ("model", "data", "rewards", "algorithm", "backend")


class RecorderParams(rlvr.plugin.Params):
    stop_at: int | None = None


class Recorder:
    """Records every call it gets (to the class list: the test reads it), and stops the run
    at ``stop_at``."""

    calls: list[tuple] = []

    def __init__(self, params: RecorderParams, run: rlvr.plugin.RunInfo) -> None:
        self.stop_at = params.stop_at
        self.max_steps = run.max_steps

    def on_run_start(self, start_step, output_dir):
        Recorder.calls.append(("start", start_step, Path(output_dir).name))

    def on_step_end(self, step, metrics, control):
        Recorder.calls.append(("step_end", step, "reward" in metrics))
        if step == self.stop_at:
            control.stop(f"recorder stops at {step}")

    def on_log(self, step, scalars):
        Recorder.calls.append(("log", step, all(isinstance(v, float) for v in scalars.values())))

    def on_save(self, step, checkpoint):
        Recorder.calls.append(("save", step, Path(checkpoint).name))

    def on_run_end(self, step, status, summary):
        Recorder.calls.append(("end", step, status, bool(summary)))


class RecorderPlugin:
    @rlvr.plugin.hookimpl
    def rlvr_register_callbacks(self, register):
        register(
            rlvr.plugin.Callback(
                name="recorder",
                params=RecorderParams,
                factory=Recorder,
                description="records what it is called with",
            )
        )


@pytest.fixture
def rows(tmp_path) -> Path:
    path = tmp_path / "rows.jsonl"
    lines = [{"prompt": f"What is {a} + {a}?", "answer": str(2 * a)} for a in range(1, 9)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def _raw(tiny_model_dir: Path, rows: Path, out: Path, **training) -> dict:
    return {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "algorithm": {"name": "grpo"},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": str(out),
            "max_steps": 5,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 6,
            "learning_rate": 1e-3,
            "reward_workers": 0,
            "save_steps": 2,
            **training,
        },
    }


def test_a_callback_plugin_sees_every_step_and_stops_the_run(tmp_path, tiny_model_dir, rows):
    """A callback named in ``callbacks:`` is called at run start, at every step's end and
    log line, at each save, and at the end; ``control.stop`` ends the run at its step, saved
    (and resumable) as any stop is."""
    host = create_host(plugins=[RecorderPlugin()])
    raw = _raw(tiny_model_dir, rows, tmp_path / "run")
    raw["callbacks"] = [{"name": "recorder", "params": {"stop_at": 3}}]
    Recorder.calls = []
    train(load_config(raw, host, require=SECTIONS), host, progress=False)

    assert Recorder.calls[0] == ("start", 0, "run")
    assert [c[1] for c in Recorder.calls if c[0] == "step_end"] == [1, 2, 3]
    assert [c for c in Recorder.calls if c[0] == "log"] == [("log", s, True) for s in (1, 2, 3)]
    assert [c[1:] for c in Recorder.calls if c[0] == "save"] == [
        (2, "checkpoint-2"),
        (3, "checkpoint-3"),
    ]
    assert Recorder.calls[-1] == ("end", 3, "stopped", True)
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2, 3]


def test_callbacks_take_a_bare_name_and_unknown_ones_are_config_errors(tiny_model_dir, rows):
    host = create_host(plugins=[RecorderPlugin()])
    raw = _raw(tiny_model_dir, rows, Path("out"))
    raw["callbacks"] = ["recorder"]
    assert load_config(raw, host, require=SECTIONS).callbacks[0].name == "recorder"
    raw["callbacks"] = ["recorde"]
    raw["training"]["report_to"] = ["tensorbord"]
    with pytest.raises(ConfigError) as err:
        load_config(raw, host, require=SECTIONS)
    text = str(err.value)
    assert "callbacks[0].name: unknown callback 'recorde'; did you mean 'recorder'?" in text
    assert "training.report_to: unknown callback 'tensorbord'; did you mean 'tensorboard'?" in text


def test_a_callback_that_raises_is_dropped_and_the_run_goes_on(tmp_path, tiny_model_dir, rows):
    """A callback that raises mid-run is reported and dropped (metrics.jsonl is the record);
    one that cannot start stops the run before its first step, with its error."""

    class Broken:
        def on_log(self, step):
            raise RuntimeError("no network")

    class Counter:
        steps: list[int] = []

        def on_step_end(self, step):
            self.steps.append(step)

    host = create_host()
    raw = _raw(tiny_model_dir, rows, tmp_path / "run", max_steps=2)
    trainer = rlvr.Trainer(raw, host=host, callbacks=[Broken(), Counter()])
    summary = trainer.train(progress=False)
    assert summary and Counter.steps == [1, 2]
    with pytest.raises(TypeError, match="is not a callback"):
        rlvr.Trainer(raw, host=host, callbacks=[object()])

    class NoStart:
        def on_run_start(self):
            raise ConnectionError("tracking server down")

    raw["training"]["output_dir"] = str(tmp_path / "second")
    with pytest.raises(ReportError, match="'NoStart' could not start: ConnectionError"):
        rlvr.Trainer(raw, host=host, callbacks=[NoStart()]).train(progress=False)
    assert not (tmp_path / "second" / "metrics.jsonl").read_text()


def test_a_transformers_trainer_callback_runs_as_trl_runs_it(tmp_path, tiny_model_dir, rows):
    """``rlvr.Trainer(callbacks=[TrainerCallback])``: called with TRL-like args, state and
    control; ``control.should_training_stop`` ends the run after that step."""
    from transformers import TrainerCallback

    seen: list[tuple] = []

    class StopAfterTwo(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.append(("begin", args.learning_rate, state.max_steps, state.global_step))

        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append(("log", state.global_step, "reward" in logs))

        def on_step_end(self, args, state, control, **kwargs):
            seen.append(("step_end", state.global_step))
            if state.global_step == 2:
                control.should_training_stop = True

        def on_save(self, args, state, control, **kwargs):
            seen.append(("save", state.global_step))

        def on_train_end(self, args, state, control, **kwargs):
            seen.append(("end", state.global_step, len(state.log_history)))

    raw = _raw(tiny_model_dir, rows, tmp_path / "run", save_steps=100)
    trainer = rlvr.Trainer(raw, host=create_host(), callbacks=[StopAfterTwo()])
    trainer.train(progress=False)
    assert seen == [
        ("begin", 1e-3, 5, 0),
        ("log", 1, True),
        ("step_end", 1),
        ("log", 2, True),
        ("step_end", 2),
        ("save", 2),
        ("end", 2, 2),
    ]
    assert [m["step"] for m in trainer.metrics()] == [1, 2]
    assert (tmp_path / "run" / "checkpoint-2").is_dir()


def test_report_to_tensorboard_writes_events(tmp_path, tiny_model_dir, rows):
    pytest.importorskip("tensorboard", reason="report_to: tensorboard needs rlvr[tensorboard]")
    host = create_host()
    raw = _raw(tiny_model_dir, rows, tmp_path / "run", max_steps=2, report_to="tensorboard")
    train(load_config(raw, host, require=SECTIONS), host, progress=False)
    events = list((tmp_path / "run" / "tensorboard").glob("events.*"))
    assert events and events[0].stat().st_size > 0


_READ_TRACKIO = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
logs = SQLiteStorage.get_logs(sys.argv[1], sys.argv[2])
print(json.dumps([{k: v for k, v in row.items() if k in ("step", "reward")} for row in logs]))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("trackio") is None, reason="report_to: trackio needs rlvr[trackio]"
)
def test_report_to_trackio_writes_a_run_trackio_shows(tmp_path, tiny_model_dir, rows):
    """The run goes into trackio's local store (``TRACKIO_DIR``), where ``trackio show``
    reads it: read back here with trackio's own storage API, in a fresh process."""
    config = tmp_path / "run.yaml"
    raw = _raw(tiny_model_dir, rows, tmp_path / "run", max_steps=2, report_to="trackio")
    config.write_text(json.dumps(raw))
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "TRACKIO_PROJECT": "rlvr-test"}
    cli = [sys.executable, "-m", "rlvr.cli.main", "train", str(config)]
    proc = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = [sys.executable, "-c", _READ_TRACKIO, "rlvr-test", "run"]
    out = subprocess.run(read, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    logged = json.loads(out.stdout)
    metrics = read_metrics(tmp_path / "run")
    assert [r["step"] for r in logged] == [1, 2]
    assert [r["reward"] for r in logged] == pytest.approx([m["reward"] for m in metrics])


@pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None, reason="report_to: mlflow needs rlvr[mlflow]"
)
def test_report_to_mlflow_logs_the_metrics(tmp_path, tiny_model_dir, rows, monkeypatch):
    """The mlflow logger, given its params through ``callbacks:`` (a local file store, which
    MLflow 3 allows with MLFLOW_ALLOW_FILE_STORE)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    host = create_host()
    raw = _raw(tiny_model_dir, rows, tmp_path / "run", max_steps=2)
    raw["callbacks"] = [{"name": "mlflow", "params": {"tracking_uri": uri, "experiment": "t"}}]
    train(load_config(raw, host, require=SECTIONS), host, progress=False)
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    run_id = (tmp_path / "run" / "mlflow_run_id.txt").read_text()
    history = client.get_metric_history(run_id, "reward")
    metrics = read_metrics(tmp_path / "run")
    assert [h.step for h in history] == [1, 2]
    assert [h.value for h in history] == pytest.approx([m["reward"] for m in metrics])
    assert "eval_pass_1" not in client.get_run(run_id).data.metrics  # no eval configured
    assert client.get_run(run_id).info.status == "FINISHED"


# --------------------------------------------------------------------------- an outside package

_PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "rlvr-steplog"
version = "0.1.0"
dependencies = ["rlvr"]

[project.entry-points.rlvr]
steplog = "rlvr_steplog"

[tool.setuptools]
packages = ["rlvr_steplog"]
"""

_INIT = """
import json

from rlvr.plugin import Callback, Params, hookimpl


class StepLogParams(Params):
    path: str
    stop_at: int


class StepLog:
    def __init__(self, params, run):
        self.params = params

    def on_step_end(self, step, scalars, control):
        with open(self.params.path, "a") as f:
            f.write(json.dumps({"step": step, "reward": scalars["reward"]}) + "\\n")
        if step == self.params.stop_at:
            control.stop(f"steplog stops at step {step}")


@hookimpl
def rlvr_register_callbacks(register):
    register(
        Callback(
            name="steplog",
            params=StepLogParams,
            factory=StepLog,
            description="logs every step to a file and stops at a chosen step",
        )
    )
"""


@pytest.mark.slow  # builds a wheel and a venv: about a minute
def test_a_pip_installed_callback_package_logs_every_step_and_stops_the_run(
    tmp_path, tiny_model_dir, rows
):
    sys.path.insert(0, str(Path(__file__).parent))
    from plugin_venv import build_and_install, make_venv, rlvr

    package = tmp_path / "rlvr-steplog"
    (package / "rlvr_steplog").mkdir(parents=True)
    (package / "pyproject.toml").write_text(_PYPROJECT)
    (package / "rlvr_steplog" / "__init__.py").write_text(_INIT)
    python = make_venv(tmp_path)
    build_and_install(python, package, tmp_path)
    listing = json.loads(rlvr(python, "plugins", "--json"))
    (steplog,) = [p for p in listing["plugins"] if p["dist"] == "rlvr-steplog"]
    assert [(r["kind"], r["name"]) for r in steplog["registers"]] == [("callback", "steplog")]

    log = tmp_path / "steps.jsonl"
    raw = _raw(tiny_model_dir, rows, tmp_path / "run", max_steps=6)
    raw["callbacks"] = [{"name": "steplog", "params": {"path": str(log), "stop_at": 4}}]
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps(raw))
    rlvr(python, "train", config)  # exit status 0, or it raises with both outputs
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    metrics = read_metrics(tmp_path / "run")
    assert [e["step"] for e in logged] == [1, 2, 3, 4] == [m["step"] for m in metrics]
    assert [e["reward"] for e in logged] == pytest.approx([m["reward"] for m in metrics])
    assert (tmp_path / "run" / "checkpoint-4").is_dir()
