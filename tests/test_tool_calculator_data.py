"""The SmolLM2 calculator recipe's products (examples/tool_calculator/make_data.py): the
held-out questions share no answer with the training ones, the script is deterministic, and
the committed 3x2 files are what it writes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "tool_calculator" / "make_data.py"


def load_script():
    spec = importlib.util.spec_from_file_location("make_data", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_held_out_products_are_never_a_training_answer():
    make = load_script()
    train = make.rows(3, 2, 3000, test=False, share=10, seed=0)
    test = make.rows(3, 2, 300, test=True, share=10, seed=0)
    assert len({r["question"] for r in train}) == 3000  # distinct questions
    assert not {r["answer"] for r in train} & {r["answer"] for r in test}
    for r in test[:20]:  # the gold is the product asked for
        a, b = r["question"].removeprefix("What is ").removesuffix("?").split(" * ")
        assert len(a) == 3 and len(b) == 2 and int(r["answer"]) == int(a) * int(b)
    assert make.rows(3, 2, 300, test=True, share=10, seed=0) == test  # deterministic


def test_the_best_constant_answer_is_the_most_frequent_gold():
    make = load_script()
    rows = [{"answer": a} for a in ["12", "7", "12", "9"]]
    assert make.best_constant(rows) == ("12", 0.5)


def test_the_committed_files_are_what_the_script_writes(tmp_path):
    committed = ROOT / "examples" / "tool_calculator" / "data" / "3x2"
    copy = tmp_path / "make_data.py"
    copy.write_text(SCRIPT.read_text())
    subprocess.run([sys.executable, str(copy), "3x2"], check=True, capture_output=True)
    for name in ("train.jsonl", "test.jsonl"):
        made = (tmp_path / "data" / "3x2" / name).read_text()
        assert made == (committed / name).read_text()
        assert all(json.loads(line)["answer"] for line in made.splitlines())
