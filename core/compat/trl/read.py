"""``read_script``: a TRL GRPO script's ``GRPOConfig(...)``, model and LoRA config read
from its syntax tree; its rewards (:mod:`rlvr.compat.trl.read_rewards`) and data
(:mod:`rlvr.compat.trl.read_data`) each have a module of their own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from rlvr.compat.trl.paste import TRL_SECTION
from rlvr.compat.trl.read_data import read_data
from rlvr.compat.trl.read_rewards import read_rewards
from rlvr.compat.trl.script import (
    LORA_INERT,
    LORA_KEYS,
    Reader,
    Script,
    argument,
    called,
    dotted_name,
    keywords,
)


def read_script(path: str | Path, config: str | Path) -> Script:
    """What ``path`` (a TRL GRPO script) says, for a config to be written at ``config`` (the
    reward functions' file paths are relative to its directory)."""
    script_path = Path(path)
    config_dir = Path(config).absolute().parent
    reader = Reader(script_path)
    out = Script(script_path)
    trainers = reader.calls("GRPOTrainer")
    trainer = trainers[0] if trainers else None
    if trainer is None:
        out.todo("model", "no GRPOTrainer(...) call found: fill in model, data and rewards")
    if len(trainers) > 1:
        out.todo(
            "model",
            f"{len(trainers)} GRPOTrainer calls: the first (line "
            f"{trainer.lineno if trainer else '?'}) was read",
        )
    _read_config(reader, trainer, out)
    _read_model(reader, trainer, out)
    _read_lora(reader, trainer, out)
    read_rewards(reader, trainer, out, Path(config))
    read_data(reader, trainer, out, config_dir)
    return out


def _grpo_config(reader: Reader, trainer: ast.Call | None) -> ast.Call | None:
    if trainer is not None:
        args = argument(trainer, "args", 2)
        if args is not None:
            node = reader.value(args, trainer.lineno)
            if called(node) == "GRPOConfig":
                assert isinstance(node, ast.Call)
                return node
    calls = reader.calls("GRPOConfig")
    return calls[0] if calls else None


def _read_config(reader: Reader, trainer: ast.Call | None, out: Script) -> None:
    config = _grpo_config(reader, trainer)
    if config is None:
        parsed = reader.calls("TrlParser") or reader.calls("HfArgumentParser")
        how = (
            "the script takes its GRPOConfig from the command line (TrlParser): put those "
            "values under trl:"
            if parsed
            else "no GRPOConfig(...) found: put the training settings under trl:"
        )
        out.todo(TRL_SECTION, how)
        return
    for arg in config.args:
        out.todo(TRL_SECTION, f"positional argument {reader.text(arg)} of GRPOConfig not read")
    for key, value in keywords(config):
        if key is None:
            out.todo(TRL_SECTION, f"**{reader.text(value)} of GRPOConfig not read: add its keys")
            continue
        ok, literal = reader.literal(value, config.lineno)
        if ok:
            out.trl[key] = literal
        else:
            out.trl_comments[key] = (reader.text(value), "TODO: not a literal; give its value")


def _read_model(reader: Reader, trainer: ast.Call | None, out: Script) -> None:
    node = argument(trainer, "model", 0) if trainer is not None else None
    if node is None:
        loads = reader.calls("from_pretrained")
        if not loads:
            out.todo("model", "no model found: set model.name_or_path (a hub id or a directory)")
            return
        node = loads[0]
    line = trainer.lineno if trainer is not None else None
    resolved, line = reader.resolve(node, line)
    if called(resolved) == "from_pretrained":
        assert isinstance(resolved, ast.Call)
        _read_model_kwargs(reader, resolved, out)
        first = argument(resolved, "pretrained_model_name_or_path", 0)
        if first is None:
            out.todo("model", f"{reader.text(resolved)}: no model name to read")
            return
        line, node = resolved.lineno, first
    else:
        node = resolved
    ok, value = reader.literal(node, line)
    if ok and isinstance(value, str):
        out.model = value
    else:
        out.todo("model", f"model={reader.text(node)} is not a literal: set model.name_or_path")


#: from_pretrained's keyword arguments that GRPOConfig's model_init_kwargs takes (rlvr: model.*).
MODEL_KWARGS = ("dtype", "torch_dtype", "attn_implementation", "revision", "trust_remote_code")


def _read_model_kwargs(reader: Reader, call: ast.Call, out: Script) -> None:
    """``from_pretrained(name, torch_dtype=torch.bfloat16, ...)``: what TRL's
    ``model_init_kwargs`` would say, added to it."""
    kwargs: dict[str, Any] = {}
    for key, value in keywords(call):
        dotted = dotted_name(value)
        ok, literal = reader.literal(value, call.lineno)
        if key in MODEL_KWARGS and (ok or dotted is not None):
            kwargs[key] = literal if ok else str(dotted).rpartition(".")[2]
        elif key == "device_map" and ok and literal is None:
            continue  # asks for nothing
        elif key != "pretrained_model_name_or_path":
            shown = f"{key}={reader.text(value)}" if key else reader.text(value)
            out.todo(
                "model",
                f"from_pretrained({shown}) not carried over: rlvr loads and places "
                "the model itself (model: takes dtype, attn_implementation, revision, "
                "trust_remote_code)",
            )
    if kwargs:
        given = out.trl.get("model_init_kwargs")
        out.trl["model_init_kwargs"] = {**kwargs, **(given if isinstance(given, dict) else {})}


def _read_lora(reader: Reader, trainer: ast.Call | None, out: Script) -> None:
    node = argument(trainer, "peft_config", None) if trainer is not None else None
    if node is None:
        return
    call = reader.value(node, trainer.lineno if trainer is not None else None)
    if called(call) != "LoraConfig":
        out.todo("model", f"peft_config={reader.text(node)} is no LoraConfig(...): set model.lora")
        return
    assert isinstance(call, ast.Call)
    lora: dict[str, Any] = {}
    for key, value in keywords(call):
        ok, literal = reader.literal(value, call.lineno)
        if key in LORA_KEYS and ok:
            lora[LORA_KEYS[key]] = literal
        elif key in LORA_INERT and ok and literal in LORA_INERT[key]:
            continue
        else:
            out.todo(
                "model",
                f"LoraConfig({reader.text(value) if key is None else key}=...) "
                "not carried over: see model.lora's keys (rlvr validate --print)",
            )
    out.lora = lora
