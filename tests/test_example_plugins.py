"""The example plugin packages of examples/plugins/, each built into a wheel, installed into a
fresh venv and used by name, as a user would: ``code_exec`` (a reward), ``pass_at_k`` (an
algorithm) and ``replay`` (a backend)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from plugin_venv import EXAMPLES, build_and_install, make_venv, rlvr, run  # noqa: E402

pytestmark = pytest.mark.slow

PACKAGES = {
    "rlvr-code-exec": ("reward", "code_exec"),
    "rlvr-passk": ("algorithm", "pass_at_k"),
    "rlvr-replay": ("backend", "replay"),
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """One fresh venv with the three example packages installed from their wheels."""
    root = tmp_path_factory.mktemp("examples")
    python = make_venv(root)
    for package in PACKAGES:
        build_and_install(python, EXAMPLES / package, root)
    return python


def python_in(venv: Path, code: str, cwd: Path | None = None) -> str:
    return run(venv, "-c", textwrap.dedent(code), cwd=cwd)


def test_listed_by_rlvr_plugins(venv):
    listing = json.loads(rlvr(venv, "plugins", "--json"))
    assert listing["failures"] == []
    for dist, (kind, name) in PACKAGES.items():
        (plugin,) = [p for p in listing["plugins"] if p["dist"] == dist]
        assert plugin["version"] == "1.0.0"
        assert [(r["kind"], r["name"]) for r in plugin["registers"]] == [(kind, name)]


# --------------------------------------------------------------------------- code_exec

SOLUTION = "Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\n"
ROWS = [
    ("pass", SOLUTION, 1.0),
    ("wrong", SOLUTION.replace("a + b", "a - b"), 0.0),
    ("last block counts", SOLUTION + "\n```python\ndef add(a, b):\n    return 0\n```", 0.0),
    ("loops", "```python\ndef add(a, b):\n    while True:\n        pass\n```", 0.0),
    ("memory", "```python\nblob = bytearray(4 * 1024**3)\ndef add(a, b): return a + b\n```", 0.0),
    ("no code", "def add(a, b): return a + b", 0.0),
    ("crash", "```python\nraise SystemExit(3)\n```", 0.0),
]


def test_code_exec_scores_a_file(venv, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "rewards:\n"
        "  - name: code_exec\n"
        "    timeout: 10\n"
        "    params: {tests_field: checks, timeout_seconds: 2, memory_mb: 256}\n"
    )
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": name, "completion": text, "checks": tests}) + "\n"
            for name, text, _ in ROWS
        )
    )
    out = tmp_path / "scored.jsonl"
    rlvr(venv, "rewards", "score", "-c", config, "-i", rows, "-o", out, "--workers", "2")
    scored = {r["id"]: r["rewards"]["code_exec"] for r in map(json.loads, out.open())}
    assert scored == {name: expected for name, _, expected in ROWS}


def test_code_exec_config_checks(venv, tmp_path, train_sections):
    config = tmp_path / "config.yaml"
    config.write_text(
        train_sections
        + "rewards:\n  - name: code_exec\n    timeout: 3\n    params: {timeout_seconds: 5}\n"
    )
    proc = run_failing(venv, "-m", "rlvr.cli.main", "validate", config)
    assert "rewards[0].timeout" in proc and "timeout_seconds" in proc


def run_failing(*cmd) -> str:
    import subprocess

    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


# --------------------------------------------------------------------------- pass_at_k


def test_pass_at_k_validates_and_conforms(venv, tmp_path, train_sections):
    config = tmp_path / "config.yaml"
    config.write_text(
        train_sections + "algorithm:\n"
        "  name: pass_at_k\n"
        "  params: {k: 4, correct_metric: answer}\n"
        "rewards: [{name: answer}, {name: format}]\n"
        "training: {num_generations: 8}\n"
    )
    resolved = rlvr(venv, "validate", config, "--print")
    assert "k: 4" in resolved and "correct_metric: answer" in resolved

    # k larger than the group: the declared requirement rejects it before any model loads
    config.write_text(
        train_sections + "rewards: [{name: answer}]\n"
        "algorithm: {name: pass_at_k, params: {k: 8}}\ntraining: {num_generations: 4}\n"
    )
    errors = run_failing(venv, "-m", "rlvr.cli.main", "validate", config)
    assert "training.num_generations" in errors and "at least 8" in errors
    python_in(
        venv,
        """
        import torch
        from rlvr.testing import check_algorithm
        from rlvr_passk.algorithm import pass_at_k_advantages

        # n = 4, c = 1, k = 2: R = 1 - C(3,2)/C(4,2) = 1/2, s = 1/2; right: (1 - 1/2) / s = 1,
        # wrong: (1 - 1/2 - C(2,1)/C(3,1)) / s = -1/3. An all-wrong group gets 0.
        correct = torch.tensor([True, False, False, False, False, False])
        adv = pass_at_k_advantages(correct, torch.tensor([0, 0, 0, 0, 1, 1]), 2)
        torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0]))
        for params in [{"k": 2}, {"k": 1, "beta": 0.05}, {"k": 3, "num_iterations": 2}]:
            metrics = check_algorithm("pass_at_k", params=params)
            assert 0.0 <= metrics["correct_frac"] <= 1.0, metrics
        """,
    )


# --------------------------------------------------------------------------- replay


def test_replay_conforms(venv, tmp_path):
    from rlvr.testing import PROMPTS

    rows = tmp_path / "replay.jsonl"
    texts = ["<answer>42</answer>", "a long completion " * 10, "Paris", "", "7 * 6 = 42"]
    rows.write_text("".join(json.dumps({"completion": t}) + "\n" for t in texts))
    by_prompt = tmp_path / "by_prompt.jsonl"
    by_prompt.write_text(
        "".join(
            json.dumps({"prompt": p, "completion": f"answer {i}"}) + "\n"
            for i, p in enumerate(PROMPTS)
        )
    )
    python_in(
        venv,
        f"""
        from rlvr.testing import check_backend
        out = check_backend("replay", params={{"path": {str(rows)!r}}}, greedy_groups=False)
        assert any(out.truncated) and not all(out.truncated)
        # one row per prompt: every completion of a group is that prompt's row
        out = check_backend("replay", params={{"path": {str(by_prompt)!r}, "match": "prompt"}})
        assert out.texts == ["answer 1"] * 3 + ["answer 2"] * 3, out.texts
        """,
    )


def test_replay_trains_one_step(venv, tmp_path):
    from rlvr.model.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in (1, 2) for b in (3, 4)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    replayed = [
        {"prompt": r["prompt"], "completion": c}
        for r in rows
        for c in (f"<think>{r['prompt']}</think><answer>{r['answer']}</answer>", "no idea")
    ]
    (tmp_path / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replayed))
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent(
            f"""\
            model: {{name_or_path: {str(model)!r}}}
            data: {{path: data.jsonl}}
            rewards: [{{name: numbers}}, {{name: format}}]
            algorithm: {{name: grpo}}
            backend: {{name: replay, params: {{path: replay.jsonl, match: prompt}}}}
            training:
              output_dir: run
              max_steps: 1
              per_device_train_batch_size: 2
              num_generations: 2
              max_completion_length: 24
              reward_workers: 0
              learning_rate: 0.001
            """
        )
    )
    rlvr(venv, "train", "config.yaml", cwd=tmp_path)
    (metrics,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert metrics["step"] == 1 and metrics["grad_norm"] > 0
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").open()]
    completions = {s["completion"] for s in samples}
    assert "no idea" in completions
    assert {s["rewards"]["numbers"] for s in samples} == {0.0, 1.0}
