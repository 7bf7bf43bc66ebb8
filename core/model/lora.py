"""LoRA through peft: adding adapters to the policy, loading and merging adapter checkpoints.

With ``model.lora`` set the trainer wraps the policy in a peft model whose only trainable
parameters are the adapters (:func:`add_adapters`). The frozen base doubles as the reference
model: :func:`adapters_off` runs a forward pass with the adapters disabled, so ``beta > 0``
costs no second copy of the weights. A checkpoint then holds the adapter
(``adapter_config.json`` + ``adapter_model.safetensors``) rather than the whole model; it is
loaded on top of the config's base model (:func:`load_adapters`) for ``--resume`` and
``rlvr eval``, and :func:`export_merged` writes base + adapter as one plain Hugging Face model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import RlvrError
from rlvr.config.schema import LoraConfig, ModelConfig
from rlvr.model.loading import load_policy, load_tokenizer, resolve_device_dtype
from rlvr.model.weights import is_peft, unwrap_model

#: The file peft writes beside an adapter's weights: its presence marks an adapter checkpoint.
ADAPTER_CONFIG = "adapter_config.json"


class LoraError(RlvrError):
    """An adapter checkpoint that cannot be used as asked."""


def is_adapter_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` holds a peft adapter (rather than a whole model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def add_adapters(model: Any, cfg: LoraConfig) -> Any:
    """``model`` wrapped in a peft LoRA model: fresh adapters (``B = 0``, so the policy starts
    exactly as the base), every base weight frozen."""
    import peft  # optional extra (rlvr[lora]): only a config with model.lora gets here

    config = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.target_modules,
        modules_to_save=cfg.modules_to_save,
        use_rslora=cfg.use_rslora,
        layers_to_transform=cfg.layers_to_transform,
        task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(model, config)
    except ValueError as exc:
        linear = sorted(
            {n.rpartition(".")[2] for n, m in model.named_modules() if type(m).__name__ == "Linear"}
        )
        raise LoraError(
            f"model.lora.target_modules {cfg.target_modules!r} does not fit this model ({exc}); "
            f"its linear layers are named {', '.join(linear)} (or use 'all-linear')"
        ) from exc


def load_adapters(model: Any, path: str | Path, *, trainable: bool) -> Any:
    """The base ``model`` with the adapter saved in ``path``; ``trainable`` for resuming."""
    from peft import PeftModel  # optional extra (rlvr[lora]): only adapter checkpoints get here

    try:
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise LoraError(
            f"cannot load the LoRA adapter in {str(path)!r} onto the base model "
            f"{getattr(model, 'name_or_path', '?')!r}: {exc}. An adapter only fits the base "
            "model it was trained on: point model.name_or_path at that model"
        ) from exc


def merged(model: Any) -> Any:
    """A plain Hugging Face model with the adapters merged into the weights (``W + s B A``);
    ``model`` itself when it has no adapters. The peft wrapper is consumed."""
    model = unwrap_model(model)
    return model.merge_and_unload() if is_peft(model) else model


def forward_model(model: Any) -> Any:
    """The transformers model to call for a forward pass: for a peft model its base model,
    whose layers carry the adapters (so its own forward keyword arguments, such as
    ``logits_to_keep``, stay available)."""
    inner = unwrap_model(model)
    return inner.get_base_model() if is_peft(inner) else model


@contextlib.contextmanager
def adapters_off(model: Any) -> Iterator[None]:
    """Forward passes inside run the frozen base model: the reference for ``beta > 0``."""
    with unwrap_model(model).disable_adapter():
        yield


def export_merged(
    checkpoint: str | Path, out: str | Path, base: Any = None, *, trust_remote_code: bool = False
) -> Path:
    """Write ``checkpoint`` (an adapter or a whole-model checkpoint) to ``out`` as one plain
    Hugging Face model (weights + tokenizer) that loads without rlvr or peft.

    The base model of an adapter is ``base`` (a :class:`~rlvr.config.schema.ModelConfig`), else the
    model section of the ``rlvr_config.yaml`` the trainer saved in the checkpoint. A saved
    ``model.trust_remote_code: true`` runs the model's code only with ``trust_remote_code``
    (``--trust-remote-code``): a checkpoint may come from anyone."""
    src, dst = Path(checkpoint), Path(out)
    if dst.exists() and any(dst.iterdir()):
        raise LoraError(f"{str(dst)!r} exists and is not empty; choose a new directory")
    cfg = base if base is not None else saved_model_config(src)
    if cfg.trust_remote_code and not trust_remote_code:
        raise LoraError(
            f"the config saved in {str(src)!r} sets model.trust_remote_code: true, which runs "
            f"the model's Python files: pass --trust-remote-code to allow it (only for a model "
            "you trust)"
        )
    if is_adapter_checkpoint(src):
        model, _ = load_policy(cfg, device="cpu", dtype=_float_dtype(cfg))
        model = merged(load_adapters(model, src, trainable=False))
    else:
        model, _ = load_policy(
            cfg.model_copy(update={"name_or_path": str(src), "gguf_file": None, "revision": None}),
            device="cpu",
            dtype=_float_dtype(cfg),
        )
    tokenizer = load_tokenizer(
        cfg.model_copy(update={"name_or_path": str(src), "gguf_file": None, "revision": None})
    )
    dst.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
    return dst


def saved_model_config(checkpoint: Path) -> Any:
    """The ``model:`` section of the config saved in ``checkpoint`` (``rlvr_config.yaml``)."""
    file = checkpoint / "rlvr_config.yaml"
    if not file.is_file():
        raise LoraError(
            f"{str(checkpoint)!r} has no rlvr_config.yaml to name its base model; "
            "give the run's config with --config"
        )
    data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    return ModelConfig.model_validate(data.get("model") or {})


def _float_dtype(cfg: Any) -> Any:
    """The config's dtype, ``auto`` meaning float32 (an export is read on any device)."""
    return resolve_device_dtype("float32" if cfg.dtype == "auto" else cfg.dtype)[1]


__all__ = [
    "ADAPTER_CONFIG",
    "LoraError",
    "adapters_off",
    "add_adapters",
    "export_merged",
    "forward_model",
    "is_adapter_checkpoint",
    "load_adapters",
    "merged",
    "saved_model_config",
]
