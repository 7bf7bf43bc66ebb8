"""TRL's GRPOConfig keys keep TRL's meaning: every field of TRL 1.16's GRPOConfig is decided
by the one table (:data:`rlvr.compat.trl.keys.TRL_KEYS`), each mapped key validates to the same
run config as its native spelling, and the cases of issue #36 (batch sizes in completions,
no wrong did-you-mean, eval and rewards score take train's config) hold."""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import create_host
from rlvr.cli.main import main
from rlvr.compat.trl.keys import OLDER_TRL_KEYS, TRL_KEYS, trl_keys_markdown
from rlvr.compat.trl.paste import TRL_DEFAULTS
from rlvr.config.schema import ConfigError, DataConfig, ModelConfig, load_config
from rlvr.data.prompts import PromptSet, format_prompt
from rlvr.runs import EVAL_SECTIONS, TRAIN_SECTIONS

SNAPSHOT = Path(__file__).with_name("trl_grpo_fields.txt")


def snapshot() -> set[str]:
    """TRL 1.16's GRPOConfig fields, as tests/trl_fields.py wrote them from the wheel."""
    lines = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    return {line for line in lines if line and not line.startswith("#")}


@pytest.fixture(scope="module")
def host():
    """The built-in plugins, with vllm available (validation only: nothing generates)."""
    host = create_host()
    vllm = host.records["backend"]["vllm"]
    host.records["backend"]["vllm"] = dataclasses.replace(vllm, available=lambda: None)
    return host


BASE: dict[str, Any] = {
    "model": {"name_or_path": "some/model"},
    "data": {"path": "rows.jsonl"},
    "rewards": [{"name": "answer"}, {"name": "format"}],
    "algorithm": {"name": "grpo"},
}


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def run_config(host, extra: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The opt-in is tested in tests/faults/test_code_execution.py; here only the mapping
        # (model_init_kwargs' trust_remote_code lands on model.trust_remote_code).
        config = load_config(
            merged(base, extra), host, require=TRAIN_SECTIONS, trust_remote_code=True
        )
    return config.model_dump(mode="json")


def problems(host, extra: dict[str, Any], require=TRAIN_SECTIONS) -> dict[str, str]:
    with pytest.raises(ConfigError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_config(merged(BASE, extra), host, require=require)
    return dict(info.value.problems)


# --------------------------------------------------------------------------- (1), (2)


def test_every_field_of_trl_1_16_grpo_config_is_decided():
    fields = snapshot()
    assert len(fields) > 150  # TrainingArguments' fields are in it too
    assert {"steps_per_generation", "generation_kwargs", "tf32", "run_name"} <= fields
    undecided = sorted(fields - set(TRL_KEYS))
    assert not undecided, f"decide these in rlvr.compat.trl.keys.TRL_KEYS: {undecided}"
    assert set(TRL_KEYS) - fields == OLDER_TRL_KEYS  # no other key beyond TRL 1.16's
    for key, entry in TRL_KEYS.items():
        assert entry.kind in ("mapped", "moved", "ignored", "error"), key
        assert entry.reason and "\n" not in entry.reason, key
        assert entry.kind != "moved" or entry.target, key


def test_the_snapshot_is_trl_1_16s_grpo_config():
    trl = pytest.importorskip("trl", reason="trl is not installed (it is no rlvr dependency)")
    if not trl.__version__.startswith("1.16"):
        pytest.skip(f"trl {trl.__version__} is installed, the snapshot is of 1.16")
    assert {f.name for f in dataclasses.fields(trl.GRPOConfig)} == snapshot()


def test_the_table_renders_as_markdown_one_row_per_key():
    table = trl_keys_markdown().splitlines()
    assert table[0].startswith("| GRPOConfig key | decision |")
    rows = table[2:]
    assert len(rows) == len(TRL_KEYS)
    keys = [row.split("`")[1] for row in rows]
    assert sorted(keys) == sorted(TRL_KEYS)
    (row,) = [r for r in rows if r.startswith("| `importance_sampling_level`")]
    assert "| moved | `algorithm.params.level` |" in row


def test_the_how_to_page_shows_the_table_as_the_code_renders_it():
    """docs/how-to/coming-from-trl.md copies the table ("its output today"): it must not drift
    (#43 item 7 changed warmup_steps' row)."""
    page = Path(__file__).parents[1] / "docs" / "how-to" / "coming-from-trl.md"
    assert trl_keys_markdown() in page.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- (3)

#: Per mapped or moved key: a `trl:` block using it, and the same run in rlvr's own keys.
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "output_dir": ({"output_dir": "/tmp/run"}, {"training": {"output_dir": "/tmp/run"}}),
    "seed": ({"seed": 7}, {"training": {"seed": 7}}),
    "learning_rate": ({"learning_rate": 3e-6}, {"training": {"learning_rate": 3e-6}}),
    "adam_beta1": ({"adam_beta1": 0.8}, {"training": {"adam_beta1": 0.8}}),
    "adam_beta2": ({"adam_beta2": 0.99}, {"training": {"adam_beta2": 0.99}}),
    "adam_epsilon": ({"adam_epsilon": 1e-6}, {"training": {"adam_epsilon": 1e-6}}),
    "weight_decay": ({"weight_decay": 0.1}, {"training": {"weight_decay": 0.1}}),
    "optim": ({"optim": "adamw_torch_fused"}, {"training": {"optim": "adamw_torch_fused"}}),
    "lr_scheduler_type": (
        {"lr_scheduler_type": "cosine"},
        {"training": {"lr_scheduler_type": "cosine"}},
    ),
    "warmup_steps": ({"warmup_steps": 0.1}, {"training": {"warmup_ratio": 0.1}}),
    "warmup_ratio": ({"warmup_ratio": 0.2}, {"training": {"warmup_ratio": 0.2}}),
    "max_grad_norm": ({"max_grad_norm": 0.5}, {"training": {"max_grad_norm": 0.5}}),
    "gradient_accumulation_steps": (
        {"gradient_accumulation_steps": 4},
        {"training": {"gradient_accumulation_steps": 4}},
    ),
    "num_generations": ({"num_generations": 4}, {"training": {"num_generations": 4}}),
    "max_completion_length": (
        {"max_completion_length": 128},
        {"training": {"max_completion_length": 128}},
    ),
    "max_prompt_length": ({"max_prompt_length": 128}, {"training": {"max_prompt_length": 128}}),
    "num_train_epochs": ({"num_train_epochs": 2.0}, {"training": {"num_train_epochs": 2.0}}),
    "temperature": ({"temperature": 0.7}, {"training": {"temperature": 0.7}}),
    "top_p": ({"top_p": 0.9}, {"training": {"top_p": 0.9}}),
    "top_k": ({"top_k": 50}, {"training": {"top_k": 50}}),
    "min_p": ({"min_p": 0.05}, {"training": {"min_p": 0.05}}),
    "repetition_penalty": (
        {"repetition_penalty": 1.1},
        {"training": {"repetition_penalty": 1.1}},
    ),
    "save_total_limit": ({"save_total_limit": 2}, {"training": {"save_total_limit": 2}}),
    "report_to": ({"report_to": "tensorboard"}, {"training": {"report_to": "tensorboard"}}),
    "gradient_checkpointing": (
        {"gradient_checkpointing": True},
        {"training": {"gradient_checkpointing": True}},
    ),
    "eval_on_start": ({"eval_on_start": False}, {"training": {"eval_on_start": False}}),
    # TRL counts completions: 32 of them are 4 prompts x 8
    "per_device_train_batch_size": (
        {"per_device_train_batch_size": 32, "num_generations": 8},
        {"training": {"per_device_train_batch_size": 4, "num_generations": 8}},
    ),
    # TRL counts optimizer steps: 10 of them with num_iterations 2 are 5 rlvr steps
    "max_steps": (
        {"max_steps": 10, "num_iterations": 2},
        {"training": {"max_steps": 5}, "algorithm": {"params": {"num_iterations": 2}}},
    ),
    "save_steps": (
        {"save_steps": 100, "num_iterations": 2},
        {"training": {"save_steps": 50}, "algorithm": {"params": {"num_iterations": 2}}},
    ),
    "logging_steps": ({"logging_steps": 5}, {"training": {"logging_steps": 5}}),
    # TRL evaluates only with eval_strategy: steps, sampled, without a step-0 eval
    "eval_steps": (
        {"eval_steps": 20, "eval_strategy": "steps", "num_generations": 4},
        {
            "training": {
                "eval_steps": 20,
                "num_generations": 4,
                "eval_sampling": "train",
                "eval_num_generations": 4,
                "eval_on_start": False,
            }
        },
    ),
    "eval_strategy": (
        {"eval_strategy": "steps", "logging_steps": 5, "num_generations_eval": 2},
        {
            "training": {
                "eval_steps": 5,
                "logging_steps": 5,
                "eval_sampling": "train",
                "eval_num_generations": 2,
                "eval_on_start": False,
            }
        },
    ),
    "num_generations_eval": (
        {"num_generations_eval": 2},
        {"training": {"eval_num_generations": 2, "eval_sampling": "train"}},
    ),
    "per_device_eval_batch_size": (
        {"per_device_eval_batch_size": 64},
        {"training": {"eval_batch_size": 64}},
    ),
    "beta": ({"beta": 0.04}, {"algorithm": {"params": {"beta": 0.04}}}),
    "epsilon": ({"epsilon": 0.3}, {"algorithm": {"params": {"epsilon": 0.3}}}),
    "epsilon_high": ({"epsilon_high": 0.28}, {"algorithm": {"params": {"epsilon_high": 0.28}}}),
    "delta": ({"delta": 3.0}, {"algorithm": {"params": {"delta": 3.0}}}),
    "num_iterations": ({"num_iterations": 2}, {"algorithm": {"params": {"num_iterations": 2}}}),
    "scale_rewards": (
        {"scale_rewards": False},
        {"algorithm": {"params": {"scale_rewards": "none"}}},
    ),
    "mask_truncated_completions": (
        {"mask_truncated_completions": True},
        {"algorithm": {"params": {"mask_truncated_completions": True}}},
    ),
    "importance_sampling_level": (
        {"importance_sampling_level": "sequence"},
        {"algorithm": {"params": {"level": "sequence"}}},
    ),
    "loss_type": ({"loss_type": "dr_grpo"}, {"algorithm": {"params": {"loss_type": "dr_grpo"}}}),
    "trust_remote_code": ({"trust_remote_code": True}, {"model": {"trust_remote_code": True}}),
    "model_init_kwargs": (
        {"model_init_kwargs": {"torch_dtype": "torch.bfloat16", "attn_implementation": "sdpa"}},
        {"model": {"dtype": "bfloat16", "attn_implementation": "sdpa"}},
    ),
    "shuffle_dataset": ({"shuffle_dataset": False}, {"data": {"shuffle": False}}),
    "chat_template_kwargs": (
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"data": {"chat_template_kwargs": {"enable_thinking": False}}},
    ),
    "generation_kwargs": (
        {"generation_kwargs": {"temperature": 0.6, "top_k": 20, "max_tokens": 64}},
        {"training": {"temperature": 0.6, "top_k": 20, "max_completion_length": 64}},
    ),
    "use_vllm": ({"use_vllm": True}, {"backend": {"name": "vllm"}}),
    "vllm_gpu_memory_utilization": (
        {"use_vllm": True, "vllm_gpu_memory_utilization": 0.5},
        {"backend": {"name": "vllm", "params": {"gpu_memory_utilization": 0.5}}},
    ),
    "vllm_tensor_parallel_size": (
        {"use_vllm": True, "vllm_tensor_parallel_size": 2},
        {"backend": {"name": "vllm", "params": {"tensor_parallel_size": 2}}},
    ),
    "vllm_max_model_length": (
        {"use_vllm": True, "vllm_max_model_length": 4096},
        {"backend": {"name": "vllm", "params": {"max_model_len": 4096}}},
    ),
    "vllm_enable_sleep_mode": (
        {"use_vllm": True, "vllm_enable_sleep_mode": True},
        {"backend": {"name": "vllm", "params": {"sleep_mode": True}}},
    ),
    "vllm_importance_sampling_correction": (
        {
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": "token_truncate",
        },
        {
            "backend": {"name": "vllm"},
            "algorithm": {"params": {"importance_sampling_correction": True}},
        },
    ),
    "vllm_importance_sampling_mode": (
        {
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": "token_truncate",
        },
        {
            "backend": {"name": "vllm"},
            "algorithm": {"params": {"importance_sampling_correction": True}},
        },
    ),
    "vllm_importance_sampling_clip_max": (
        {
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": "token_truncate",
            "vllm_importance_sampling_clip_max": 3.0,
        },
        {
            "backend": {"name": "vllm"},
            "algorithm": {
                "params": {"importance_sampling_correction": True, "importance_sampling_cap": 3.0}
            },
        },
    ),
    "vllm_importance_sampling_cap": (
        {
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": "token_truncate",
            "vllm_importance_sampling_cap": 2.5,
        },
        {
            "backend": {"name": "vllm"},
            "algorithm": {
                "params": {"importance_sampling_correction": True, "importance_sampling_cap": 2.5}
            },
        },
    ),
    "fsdp": (
        {"fsdp": "full_shard auto_wrap offload"},
        {"training": {"parallelism": "fsdp", "fsdp_cpu_offload": True}},
    ),
}


def moved_keys() -> list[str]:
    return sorted(k for k, e in TRL_KEYS.items() if e.kind in ("mapped", "moved"))


def with_trl_defaults(trl: dict[str, Any], native: dict[str, Any]) -> dict[str, Any]:
    """``native`` plus, spelt natively, TRL's defaults of the keys the ``trl:`` block ``trl``
    leaves out (what the block means in TRL), where ``native`` does not set them."""
    training = native.get("training", {})
    algorithm = native.get("algorithm", {})
    params = algorithm.get("params", {})
    out: dict[str, Any] = {"training": {}, "algorithm": {"params": {}}}
    for key, value in TRL_DEFAULTS.items():
        if key in trl or key in training or key in params:
            continue
        if key in ("loss_type", "beta"):
            if algorithm.get("name", "grpo") == "grpo":
                out["algorithm"]["params"][key] = value
        elif key == "per_device_train_batch_size":
            out["training"][key] = value // trl.get("num_generations", 8)
        else:
            out["training"][key] = value
    return merged(out, native)


@pytest.mark.parametrize("key", moved_keys())
def test_a_trl_key_validates_to_the_run_its_native_spelling_gives(host, key):
    assert key in EXAMPLES, f"give {key} an example in EXAMPLES"
    trl, native = EXAMPLES[key]
    assert key in trl
    pasted = run_config(host, {"trl": trl})
    assert pasted == run_config(host, with_trl_defaults(trl, native))
    inert = {"seed": 42}  # TRL's default and rlvr's: a trl: block with only TRL's defaults
    baseline = run_config(host, {"trl": inert})
    assert pasted != baseline, f"{key}'s example changes nothing"


def test_trl_defaults_are_trl_1_16s():
    recorded = json.loads(Path(__file__).with_name("trl_grpo_defaults.json").read_text())
    assert recorded.pop("trl") == "1.16.0"
    assert recorded == TRL_DEFAULTS


def test_a_trl_block_means_trl_defaults_for_the_keys_it_leaves_out(host):
    pasted = run_config(host, {"trl": {"learning_rate": 1e-5}})
    native = run_config(host, {"training": {"learning_rate": 1e-5}})
    assert native["algorithm"]["params"]["loss_type"] == "grpo"  # rlvr's own defaults differ
    assert pasted["algorithm"]["params"]["loss_type"] == "dapo"  # TRL 1.16's
    assert pasted["algorithm"]["params"]["beta"] == 0.0
    assert pasted["training"]["max_completion_length"] == 512
    assert pasted["training"]["num_train_epochs"] == 3.0
    # 8 completions in TRL: one prompt x num_generations 8 in rlvr
    assert pasted["training"]["per_device_train_batch_size"] == 1
    assert pasted["training"]["num_generations"] == 8


def test_a_native_setting_wins_over_a_trl_default(host):
    pasted = run_config(
        host,
        {
            "trl": {"learning_rate": 1e-5, "num_generations": 4},
            "algorithm": {"name": "grpo", "params": {"beta": 0.1}},
            "training": {"max_completion_length": 64},
        },
    )
    assert pasted["algorithm"]["params"]["beta"] == 0.1
    assert pasted["algorithm"]["params"]["loss_type"] == "dapo"
    assert pasted["training"]["max_completion_length"] == 64
    assert pasted["training"]["per_device_train_batch_size"] == 2  # 8 completions / 4


def test_a_set_on_the_command_line_wins_over_the_trl_block(host):
    """``--set training.output_dir=...`` on a config with a ``trl:`` block: the command line
    wins, as it does over any key of the file (it was "also set ...; keep only one")."""
    extra = {"trl": {"output_dir": "from-trl", "learning_rate": 1e-5, "beta": 0.04}}
    sets = ["training.output_dir=/tmp/from-cli", "algorithm.params.beta=0.2"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = load_config(merged(BASE, extra), host, require=TRAIN_SECTIONS, overrides=sets)
    assert config.training.output_dir == "/tmp/from-cli"
    assert config.algorithm is not None and config.algorithm.params.beta == 0.2
    assert config.training.learning_rate == 1e-5  # the block's other keys still apply
    # in the file, two values for one key stay a problem
    found = problems(host, {**extra, "training": {"output_dir": "elsewhere"}})
    assert "keep only one" in found["trl.output_dir"]
    # a --set of a training: key that is read as TRL's too (eval_steps) keeps its value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = load_config(
            BASE, host, require=TRAIN_SECTIONS, overrides=["training.eval_steps=3"]
        )
    assert config.training.eval_steps == 3


def test_trl_algorithm_defaults_stay_off_another_algorithm(host):
    pasted = run_config(host, {"trl": {"learning_rate": 1e-5}, "algorithm": {"name": "dr_grpo"}})
    native = run_config(host, {"algorithm": {"name": "dr_grpo"}})
    assert pasted["algorithm"] == native["algorithm"]


def test_trl_default_batch_that_splits_a_group_is_an_error(host):
    found = problems(host, {"trl": {"num_generations": 16}})
    message = found["trl.per_device_train_batch_size"]
    assert "TRL's default of 8 completions" in message and "num_generations 16" in message


#: A value each ignored or error key does not ignore silently.
NOT_INERT: dict[str, Any] = {
    "steps_per_generation": 3,
    "generation_batch_size": 24,
    "multi_objective_aggregation": "normalize_then_sum",
    "vllm_mode": "server",
    "save_strategy": "no",
    "logging_strategy": "epoch",
    "reward_weights": [1.0, 0.5],
}


def other_keys(kind: str) -> list[str]:
    return sorted(k for k, e in TRL_KEYS.items() if e.kind == kind)


@pytest.mark.parametrize("key", other_keys("ignored"))
def test_an_ignored_key_says_why_in_one_line(host, key):
    value = NOT_INERT.get(key, 12345)
    with pytest.warns(UserWarning) as caught:
        pasted = load_config(merged(BASE, {"trl": {key: value}}), host, require=TRAIN_SECTIONS)
    (message,) = [str(w.message) for w in caught if str(w.message).startswith(f"trl.{key} ")]
    assert message.startswith(f"trl.{key} is ignored: ") and "\n" not in message
    only_defaults = merged(BASE, {"trl": {"seed": 42}})  # TRL's defaults, no other key
    expected = load_config(only_defaults, host, require=TRAIN_SECTIONS)
    assert pasted.model_dump() == expected.model_dump()
    # its TRL default asks for nothing rlvr does not do: no word
    for inert in TRL_KEYS[key].inert:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            load_config(merged(BASE, {"trl": {key: inert}}), host, require=TRAIN_SECTIONS)


@pytest.mark.parametrize("key", other_keys("error"))
def test_an_error_key_is_one_problem_with_the_fix_and_no_did_you_mean(host, key):
    found = problems(host, {"trl": {key: NOT_INERT.get(key, 12345)}})
    assert list(found) == [f"trl.{key}"], found
    assert "did you mean" not in found[f"trl.{key}"]
    for inert in TRL_KEYS[key].inert:
        run_config(host, {"trl": {key: inert}})


# --------------------------------------------------------------------------- (4) the issue


def test_per_device_train_batch_size_keeps_trl_meaning_or_is_an_error(host):
    """Issue #36: a pasted per_device_train_batch_size: 32 meant 32 prompts x 8 in rlvr."""
    paste = {"per_device_train_batch_size": 32, "num_generations": 8, "bf16": True}
    assert run_config(host, {"trl": paste})["training"]["per_device_train_batch_size"] == 4
    # the same paste under training: (rlvr counts prompts there) is refused, pointing at trl:
    msg = problems(host, {"training": paste})["training.per_device_train_batch_size"]
    assert "32 prompts x num_generations 8 = 256 completions" in msg
    assert "TRL-only keys (bf16)" in msg and "top-level `trl:` section" in msg
    # rlvr's own keys only: rlvr's meaning, no question asked
    own = {"per_device_train_batch_size": 32, "num_generations": 8}
    assert run_config(host, {"training": own})["training"]["per_device_train_batch_size"] == 32
    # not whole groups: the fix keeps the completions per step
    msg = problems(host, {"trl": {"per_device_train_batch_size": 4, "num_generations": 8}})
    assert msg["trl.per_device_train_batch_size"].endswith("use a multiple of 8")
    paste = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
    msg = problems(host, {"trl": paste})["trl.per_device_train_batch_size"]
    assert "8 with gradient_accumulation_steps: 2 for the same 16 completions per step" in msg
    # TRL's generation units have no home under training:
    msg = problems(host, {"training": {"steps_per_generation": 4}})["training.steps_per_generation"]
    assert "`trl:`" in msg and "num_iterations" in msg
    assert run_config(host, {"trl": {"steps_per_generation": 1}})  # = gradient_accumulation_steps


def test_trl_warmup_steps_count_trl_updates_as_max_steps_do(host):
    """#43 item 7: rlvr's warmup_steps counts steps, as max_steps does; a pasted warmup_steps
    keeps TRL's unit (optimizer updates): 4 of them with num_iterations 2 are 2 rlvr steps, and
    the warm-up still ends after the same updates."""
    paste = {"warmup_steps": 4, "max_steps": 10, "num_iterations": 2}
    training = run_config(host, {"trl": paste})["training"]
    assert (training["warmup_steps"], training["max_steps"]) == (2, 5)
    msg = problems(host, {"trl": {**paste, "warmup_steps": 5}})["trl.warmup_steps"]
    assert "not a whole number of them: use a multiple of 2" in msg
    # one update a step: the same count; under training: rlvr's steps as written
    assert run_config(host, {"trl": {"warmup_steps": 5}})["training"]["warmup_steps"] == 5
    native = {"training": {"warmup_steps": 5}, "algorithm": {"params": {"num_iterations": 2}}}
    assert run_config(host, native)["training"]["warmup_steps"] == 5


def test_generation_kwargs_move_and_never_get_a_wrong_hint(host):
    """Issue #36: generation_kwargs was an unknown key with "did you mean num_generations"."""
    config = run_config(host, {"training": {"generation_kwargs": {"temperature": 0.5}}})
    assert config["training"]["temperature"] == 0.5
    found = problems(host, {"training": {"generation_kwargs": {"num_beams": 4}}})
    (msg,) = found.values()
    assert list(found) == ["training.generation_kwargs.num_beams"]
    assert "did you mean" not in msg and "num_beams has no equivalent" in msg
    # a misspelt TRL key: the TRL key is the hint, not an unrelated rlvr one
    msg = problems(host, {"training": {"generation_kwarg": {}}})["training.generation_kwarg"]
    assert "did you mean 'generation_kwargs'?" in msg
    msg = problems(host, {"trl": {"reward_workers": 2}})["trl.reward_workers"]
    assert "did you mean" not in msg and "rlvr's own settings go under training:" in msg
    # every common TRL key of the issue is accepted (moved or ignored), none an unknown key
    common = {
        "generation_kwargs": {"top_p": 0.95},
        "steps_per_generation": 1,
        "use_liger_loss": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "model_init_kwargs": {"dtype": "bfloat16"},
        "shuffle_dataset": True,
        "run_name": "exp1",
        "save_strategy": "steps",
        "tf32": True,
        "importance_sampling_level": "sequence",
        "multi_objective_aggregation": "sum_then_normalize",
    }
    config = run_config(host, {"trl": common, "algorithm": {"name": "gspo"}})
    assert config["algorithm"]["params"]["level"] == "sequence"
    assert config["model"]["dtype"] == "bfloat16" and config["training"]["top_p"] == 0.95


def test_eval_and_rewards_score_accept_the_train_config(host, tmp_path, capsys):
    """Issue #36: rlvr eval and rewards score rejected `training.beta` that train accepts."""
    train = {
        "model": {"name_or_path": "some/model"},
        "data": {"path": "rows.jsonl"},
        "rewards": [{"name": "numbers"}],
        "training": {
            "beta": 0.04,
            "generation_kwargs": {"temperature": 0.9},
            "shuffle_dataset": False,
            "reward_workers": 0,
        },
        "trl": {"importance_sampling_level": "token", "use_vllm": False, "bf16": True},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trained = load_config(train, host, require=TRAIN_SECTIONS)
        for require in (EVAL_SECTIONS, ("rewards",)):
            config = load_config(train, host, require=require, training=False)
            assert config.training == trained.training and config.data == trained.data
            assert config.algorithm is None  # not needed here, not made up
    assert trained.algorithm.params.beta == 0.04
    # the command itself
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(train))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"completion": "#### 4", "answer": "4"}) + "\n")
    out = tmp_path / "scored.jsonl"
    assert main(["rewards", "score", "-c", str(path), "-i", str(rows), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["rewards"]["numbers"] == 1.0
    assert "unknown key" not in capsys.readouterr().err


def test_algorithm_keys_the_algorithm_lacks_say_which_have_them(host):
    msg = problems(host, {"algorithm": {"name": "rloo"}, "trl": {"scale_rewards": "batch"}})
    assert msg["trl.scale_rewards"].startswith(
        "TRL's scale_rewards is algorithm.params.scale_rewards, which algorithm 'rloo' does not "
        "have (grpo,"
    )
    msg = problems(host, {"trl": {"loss_type": "cispo"}})["trl.loss_type"]
    assert "set algorithm.name: cispo" in msg
    msg = problems(host, {"trl": {"beta": 0.1}, "algorithm": {"params": {"beta": 0.2}}})
    assert "keep only one" in msg["trl.beta"]


# --------------------------------------------------------------------------- prompts


def test_chat_template_kwargs_reach_the_template(tiny_model_dir):
    from rlvr.model.loading import load_tokenizer

    tok = load_tokenizer(ModelConfig(name_or_path=str(tiny_model_dir)))
    tok.chat_template = (
        "{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %} /no_think{% endif %}"
    )
    row = {"prompt": "2 + 2?"}
    on = DataConfig(path="x", chat_template=True)
    off = DataConfig(path="x", chat_template=True, chat_template_kwargs={"enable_thinking": False})
    assert format_prompt(row, on, tok, True) == "2 + 2?"
    assert format_prompt(row, off, tok, True) == "2 + 2? /no_think"


def test_plain_string_prompts_through_the_template_warn_unless_explicit(tiny_model_dir):
    """rlvr sends plain strings through the chat template where TRL does not: a warned
    default, silenced by an explicit data.chat_template."""
    from rlvr.model.loading import load_tokenizer

    tok = load_tokenizer(ModelConfig(name_or_path=str(tiny_model_dir)))
    rows = [{"prompt": "What is 2 + 2?"}]
    with pytest.warns(UserWarning, match="data.chat_template is unset: the plain-string"):
        templated = PromptSet(rows, DataConfig(path="x"), tok, None)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explicit = PromptSet(rows, DataConfig(path="x", chat_template=True), tok, None)[0]
        plain = PromptSet(rows, DataConfig(path="x", chat_template=False), tok, None)[0]
        chat = [{"prompt": [{"role": "user", "content": "What is 2 + 2?"}]}]
        PromptSet(chat, DataConfig(path="x"), tok, None)
    assert templated.text == explicit.text != plain.text == "What is 2 + 2?"


def test_a_grpoconfig_pasted_under_training_is_refused_or_warned_by_its_shape(host):
    """#45 item 9: a GRPOConfig with no TRL-only key but TRL's algorithm keys (their rlvr home
    is algorithm.params) validated under training: and trained 8x the completions a step and
    rlvr's loss_type grpo instead of TRL's dapo."""
    paste = {"per_device_train_batch_size": 16, "num_generations": 8, "beta": 0.04}
    msg = problems(host, {"training": paste})["training.per_device_train_batch_size"]
    assert "16 prompts x num_generations 8 = 128 completions" in msg
    assert "TRL-only keys (beta)" in msg and "top-level `trl:` section" in msg
    # the same block under trl: is TRL's run: 2 prompts x 8, dapo
    config = run_config(host, {"trl": paste})
    assert config["training"]["per_device_train_batch_size"] == 2
    assert config["algorithm"]["params"]["loss_type"] == "dapo"
    # without a batch size, rlvr's default batch holds there, and the user is told before
    with pytest.warns(ConfigWarning, match="training: holds TRL GRPOConfig keys") as seen:
        load_config(merged(BASE, {"training": {"loss_type": "dapo"}}), host, require=TRAIN_SECTIONS)
    (warning,) = [w for w in seen if "GRPOConfig" in str(w.message)]
    text = str(warning.message)
    assert "8 prompts x num_generations 8 = 64 completions a micro-batch" in text
    assert "TRL's default: 8 completions" in text and "`trl:`" in text
    # rlvr's own spelling of the same settings: no word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native = {
            "training": {"per_device_train_batch_size": 16, "num_generations": 8},
            "algorithm": {"name": "grpo", "params": {"beta": 0.04}},
        }
        load_config(merged(BASE, native), host, require=TRAIN_SECTIONS)
