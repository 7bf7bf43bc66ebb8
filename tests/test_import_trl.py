"""``rlvr import-trl SCRIPT.py`` and ``rlvr init``: a config from a TRL script's text (never run)
or a commented starter, which ``rlvr validate`` accepts once the model and data exist here."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.cli.main import main, parse_args

# Two TRL GRPO scripts as people write them. Their top level stops or leaves a mark if run:
# import-trl must only read them.
LORA_SCRIPT = '''
"""GRPO with LoRA on GSM8K-style data (after the TRL docs)."""
import re

import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

raise SystemExit("this script was run")

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def extract_answer(text):
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def correctness_reward_func(prompts, completions, answer, **kwargs):
    responses = [completion[0]["content"] for completion in completions]
    return [2.0 if extract_answer(r) == a else 0.0 for r, a in zip(responses, answer)]


def strict_format_reward_func(completions, **kwargs):
    pattern = r"^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n$"
    responses = [completion[0]["content"] for completion in completions]
    return [0.5 if re.match(pattern, r) else 0.0 for r in responses]


dataset = load_dataset("openai/gsm8k", "main", split="train")
dataset = dataset.map(lambda x: {"prompt": x["question"], "answer": x["answer"]})

training_args = GRPOConfig(
    output_dir="outputs/Qwen-0.5B-GRPO",
    run_name="Qwen-0.5B-GRPO-gsm8k",
    learning_rate=5e-6,
    adam_beta2=0.99,
    weight_decay=0.1,
    warmup_ratio=0.1,
    lr_scheduler_type="cosine",
    logging_steps=1,
    bf16=True,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=4,
    num_generations=8,
    max_completion_length=786,
    num_train_epochs=1,
    save_steps=100,
    max_grad_norm=0.1,
    report_to="none",
    beta=0.04,
    loss_type="dr_grpo",
    push_to_hub=True,
    reward_weights=[1.0, 0.5],
    steps_per_generation=8,
)
peft_config = LoraConfig(
    r=16,
    lora_alpha=64,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    task_type="CAUSAL_LM",
    lora_dropout=0.05,
    bias="none",
)
model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.bfloat16, device_map=None)
trainer = GRPOTrainer(
    model=model,
    reward_funcs=[correctness_reward_func, strict_format_reward_func],
    args=training_args,
    train_dataset=dataset,
    peft_config=peft_config,
)
trainer.train()
'''

PLAIN_SCRIPT = """
import argparse
from pathlib import Path

from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer

from my_rewards import keyword_reward

Path("was_run").write_text("the script ran")


def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    model_id = "Qwen/Qwen2-0.5B-Instruct"
    dataset = load_dataset("json", data_files="data/prompts.jsonl", split="train")
    config = GRPOConfig(
        output_dir="Qwen2-0.5B-GRPO",
        logging_steps=10,
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=args.steps,
        temperature=0.9,
        use_vllm=False,
    )
    trainer = GRPOTrainer(
        model=model_id,
        reward_funcs=[reward_len, keyword_reward],
        args=config,
        train_dataset=dataset,
    )
    trainer.train()


if __name__ == "__main__":
    main()
"""

MY_REWARDS = """
def keyword_reward(completions, **kwargs):
    return [float("answer" in c) for c in completions]
"""


def _allows_code() -> list[str]:
    """``--allow-code`` where the command line has it (a config that names code to import,
    as ``callable`` rewards do, needs it there)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parse_args(["validate", "c.yaml", "--allow-code"])
    except SystemExit:
        return []
    return ["--allow-code"]


def _rlvr(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    if args[0] == "validate":
        args = (*args, *_allows_code())
    return subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def scripts(tmp_path) -> Path:
    (tmp_path / "train_lora.py").write_text(LORA_SCRIPT)
    (tmp_path / "train_plain.py").write_text(PLAIN_SCRIPT)
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "Say hi", "answer": "hi"}]
    (tmp_path / "data" / "prompts.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return tmp_path


def test_a_lora_script_becomes_a_config_that_validates(scripts, tiny_model_dir):
    proc = _rlvr(scripts, "import-trl", "train_lora.py")
    assert proc.returncode == 0, proc.stderr
    config = scripts / "train_lora.rlvr.yaml"
    data = yaml.safe_load(config.read_text())
    assert data["model"] == {
        "name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
        "lora": {
            "r": 16,
            "alpha": 64,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "dropout": 0.05,
        },
    }
    # the script's map(lambda x: {"prompt": x["question"], ...}) only renames: prompt_field
    assert data["data"] == {"path": "openai/gsm8k", "split": "train", "prompt_field": "question"}
    # Importing the script would run it: its functions are copied to a module of their own.
    assert data["rewards"] == [
        {
            "name": "callable",
            "label": "correctness_reward_func",
            "weight": 1.0,
            "params": {
                "function": "train_lora_rewards.py:correctness_reward_func",
                "format": "conversational",  # it reads completion[0]["content"]
            },
        },
        {
            "name": "callable",
            "label": "strict_format_reward_func",
            "weight": 0.5,
            "params": {
                "function": "train_lora_rewards.py:strict_format_reward_func",
                "format": "conversational",
            },
        },
    ]
    module = (scripts / "train_lora_rewards.py").read_text()
    assert "raise SystemExit" not in module and "GRPOTrainer" not in module
    namespace: dict = {}
    exec(compile(module, "train_lora_rewards.py", "exec"), namespace)  # the copy, not the script
    good = [[{"role": "assistant", "content": "<reasoning>...</reasoning><answer>4</answer>"}]]
    assert namespace["correctness_reward_func"](["q"], good, answer=["4"]) == [2.0]
    assert namespace["correctness_reward_func"](["q"], good, answer=["5"]) == [0.0]
    assert set(namespace) >= {"re", "extract_answer", "strict_format_reward_func"}
    assert "MODEL" not in namespace  # only what the functions use
    trl = data["trl"]
    assert trl["learning_rate"] == 5e-6 and trl["per_device_train_batch_size"] == 16
    assert trl["beta"] == 0.04 and trl["loss_type"] == "dr_grpo"
    assert trl["model_init_kwargs"] == {"torch_dtype": "bfloat16"}
    # ignored and rejected keys are comments that say why, not keys
    for key in ("bf16", "push_to_hub", "run_name", "steps_per_generation", "reward_weights"):
        assert key not in trl
    text = config.read_text()
    assert "# bf16: true  # ignored: " in text
    assert "# steps_per_generation: 8  # TODO: " in text
    assert "the script changes the rows" not in text
    report = proc.stdout
    assert "needs your attention" in report and "names a dataset config" in report
    assert "trl.steps_per_generation" in report

    # Valid for rlvr train once the model and the data are here (the hub's are not).
    rows = scripts / "data" / "gsm8k.jsonl"
    rows.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
    proc = _rlvr(
        scripts,
        "validate",
        config,
        "--allow-code",
        "--set",
        f"model.name_or_path={tiny_model_dir}",
        "--set",
        f"data.path={rows}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("OK: ")
    # No key warned: every key that would have is a comment. The data's plain-string prompts
    # get the warning rlvr train gives them (validate shows train's warnings, #45 item 4).
    warned = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert [w.split(":")[1] for w in warned] == [" data.chat_template is unset"], proc.stderr


def test_a_plain_script_with_main_and_imports(scripts, tiny_model_dir):
    out = scripts / "configs" / "plain.yaml"
    proc = _rlvr(scripts, "import-trl", "train_plain.py", "-o", out)
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(out.read_text())
    assert data["model"] == {"name_or_path": "Qwen/Qwen2-0.5B-Instruct"}
    # a data file, as the script would find it from its directory; paths in a config are
    # relative to the config's directory
    assert data["data"] == {"path": "../data/prompts.jsonl"}
    assert [r["params"]["function"] for r in data["rewards"]] == [
        "plain_rewards.py:reward_len",  # the script writes a file when imported
        "my_rewards:keyword_reward",
    ]
    assert (out.parent / "plain_rewards.py").is_file()  # named after the config
    assert data["trl"] == {
        "output_dir": "Qwen2-0.5B-GRPO",
        "logging_steps": 10,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "temperature": 0.9,
        "use_vllm": False,
    }
    assert "# max_steps: args.steps  # TODO: not a literal" in out.read_text()
    assert "trl.max_steps: not a literal" in proc.stdout

    proc = _rlvr(
        scripts, "validate", out, "--allow-code", "--set", f"model.name_or_path={tiny_model_dir}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


SAFE_SCRIPT = """
import re


def digits_reward(completions, **kwargs):
    return [float(bool(re.fullmatch(r"[0-9]+", c.strip()))) for c in completions]


def main():
    from trl import GRPOConfig, GRPOTrainer

    trainer = GRPOTrainer(
        model="Qwen/Qwen2-0.5B-Instruct",
        reward_funcs=digits_reward,
        args=GRPOConfig(output_dir="out", num_generations=4),
        train_dataset=load_dataset("json", data_files="data/prompts.jsonl", split="train"),
    )
    trainer.train()


if __name__ == "__main__":
    main()
"""


def test_a_script_that_only_defines_is_pointed_at(scripts, tiny_model_dir):
    (scripts / "train_safe.py").write_text(SAFE_SCRIPT)
    proc = _rlvr(scripts, "import-trl", "train_safe.py")
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load((scripts / "train_safe.rlvr.yaml").read_text())
    assert data["rewards"] == [
        {
            "name": "callable",
            "label": "digits_reward",
            "params": {"function": "train_safe.py:digits_reward"},
        }
    ]
    assert not (scripts / "train_safe_rewards.py").exists()
    config = scripts / "train_safe.rlvr.yaml"
    proc = _rlvr(
        scripts, "validate", config, "--allow-code", "--set", f"model.name_or_path={tiny_model_dir}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_nothing_is_run(scripts):
    for script in ("train_lora.py", "train_plain.py"):
        assert _rlvr(scripts, "import-trl", script).returncode == 0
    assert not (scripts / "was_run").exists()


def test_an_existing_file_is_kept_unless_forced(scripts, capsys):
    config = scripts / "train_plain.rlvr.yaml"
    config.write_text("mine\n")
    assert main(["import-trl", str(scripts / "train_plain.py")]) == 1
    assert "exists; pass --force" in capsys.readouterr().err
    assert config.read_text() == "mine\n"
    assert main(["import-trl", str(scripts / "train_plain.py"), "--force"]) == 0
    assert config.read_text() != "mine\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(:\n", "line 1: SyntaxError"),
        ("print('no trainer')\n", "no GRPOTrainer(...) call found"),
    ],
)
def test_what_cannot_be_read_is_said(tmp_path, capsys, source, message):
    script = tmp_path / "s.py"
    script.write_text(source)
    code = main(["import-trl", str(script)])
    captured = capsys.readouterr()
    assert message in captured.out + captured.err
    assert code == (1 if "SyntaxError" in message else 0)


def test_a_missing_script_is_one_error(tmp_path, capsys):
    assert main(["import-trl", str(tmp_path / "nope.py")]) == 1
    assert capsys.readouterr().err.startswith("error: no file ")


def test_init_writes_a_starter_that_validates(tmp_path, tiny_model_dir):
    proc = _rlvr(tmp_path, "init")
    assert proc.returncode == 0, proc.stderr
    config = tmp_path / "rlvr.yaml"
    text = config.read_text()
    assert text.count("# TODO") >= 3  # the model, the data and the gold column
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n')
    proc = _rlvr(
        tmp_path,
        "validate",
        config,
        "--allow-code",
        "--set",
        f"model.name_or_path={tiny_model_dir}",
        "--set",
        f"data.path={rows}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _rlvr(tmp_path, "init").returncode == 1  # never over a file


def test_init_from_trl_is_import_trl(scripts):
    proc = _rlvr(scripts, "init", "--from-trl", "train_plain.py", "-o", "a.yaml")
    assert proc.returncode == 0, proc.stderr
    again = _rlvr(scripts, "import-trl", "train_plain.py", "-o", "b.yaml")
    assert again.returncode == 0, again.stderr

    def body(name: str) -> str:  # the same config; the header names the command
        text = (scripts / f"{name}.yaml").read_text().split("\n", 1)[1]
        return text.replace(f"{name}_rewards.py", "REWARDS.py")

    assert body("a") == body("b")
    assert (scripts / "a_rewards.py").read_text() == (scripts / "b_rewards.py").read_text()


def test_the_help_lists_both_commands():
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", "--help"], capture_output=True, text=True
    ).stdout
    assert "import-trl" in out and "init" in out


@pytest.mark.parametrize(
    ("change", "field", "todo"),
    [
        ('.rename_column("q", "prompt")', "q", False),
        ('.rename_columns({"q": "prompt", "a": "a"})', "q", False),
        ('.map(lambda r: {"prompt": r["q"]}).rename_column("a", "answer")', "q", True),
        ('.rename_column("q", "text").map(lambda r: {"prompt": r["text"]})', "q", True),
        ('.map(lambda r: {"prompt": [{"role": "user", "content": r["q"]}]})', None, True),
        (".filter(lambda r: len(r['q']) < 200)", None, True),
    ],
)
def test_a_renamed_prompt_column_becomes_prompt_field(tmp_path, change, field, todo):
    """A rename of the prompt column is data.prompt_field; any other change of the rows (a
    built chat prompt, a filter, another column renamed) stays a TODO: rlvr reads rows as
    stored."""
    script = tmp_path / "train.py"
    script.write_text(
        "from datasets import load_dataset\n"
        "from trl import GRPOTrainer\n"
        f"ds = load_dataset('json', data_files='/d/rows.jsonl', split='train'){change}\n"
        "GRPOTrainer(model='m', reward_funcs=[], train_dataset=ds).train()\n"
    )
    assert main(["import-trl", str(script)]) == 0
    text = (tmp_path / "train.rlvr.yaml").read_text()
    data = yaml.safe_load(text)["data"]
    assert data.get("prompt_field") == field
    assert ("the script changes the rows" in text) is todo


def test_an_absolute_data_file_stays_absolute_and_a_reward_model_says_what_it_is(tmp_path):
    data = tmp_path / "elsewhere" / "rows.jsonl"
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir()
    script.write_text(
        "from datasets import load_dataset\n"
        "from trl import GRPOTrainer\n"
        f"ds = load_dataset('json', data_files={str(data)!r}, split='train')\n"
        "GRPOTrainer(model='m', reward_funcs=['./rm'], train_dataset=ds).train()\n"
    )
    assert main(["import-trl", str(script)]) == 0
    text = (script.parent / "train.rlvr.yaml").read_text()
    assert f"  path: {data}\n" in text
    assert "relative to the script's directory" not in text
    assert "- name: reward_model  # a reward model, scored as TRL scores it" in text
