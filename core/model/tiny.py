"""Tiny random-init language models for tests and demos, built offline in about a second.

:func:`build_tiny_model` writes a directory that loads with ``AutoModelForCausalLM`` /
``AutoTokenizer`` and with vLLM (CPU included): a random Qwen2 model saved in float32
safetensors, and a byte-level BPE tokenizer trained on the spot with the ``tokenizers`` library.

The tokenizer:

- splits text like Qwen2 (one token per digit), so arithmetic is tokenized sensibly;
- has the special tokens ``<|endoftext|>`` (padding), ``<|im_start|>`` and ``<|im_end|>``
  (end of sequence, and the end of a chat turn), skipped by ``decode(skip_special_tokens=True)``;
- has ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` as single *added* tokens that are
  not special, so they survive decoding (rewards read them);
- carries a ChatML chat template.

:func:`write_gguf` exports such a directory to a GGUF file (F32 or Q8_0), to test GGUF loading
without a download.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD_TOKEN = "<|endoftext|>"
BOS_CHAT = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_CHAT, EOS_TOKEN)
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

#: Qwen2's pre-tokenizer split (digits one by one); GGUF files name it ``qwen2``.
SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_NAMES = ("Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina")
_ITEMS = tuple(
    "clips apples books pages dollars cookies marbles eggs pens students boxes bags cars miles "  # noqa: SIM905
    "hours minutes tickets cupcakes".split()
)
_WORDS = tuple(
    "the total each week day month year money cost price spent left half twice percent per "  # noqa: SIM905
    "earns pays store school friends shop sells buys gives takes more less than every remaining "
    "altogether first second third times many much after before if she he they we his her "
    "their answer step so therefore because then number which equals sum difference product "
    "minus plus divided multiplied by of to in on for with at from".split()
)


def default_corpus(seed: int = 0, size: int = 300) -> list[str]:
    """A small synthetic corpus: arithmetic, GSM8K-like problems and tagged solutions."""
    rng = random.Random(seed)
    lines = [
        "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ( ) . , ? ! $ % #### ",
        "You are a helpful assistant. Solve the problem step by step.",
        "Put your reasoning in <think> </think> and the final answer in <answer> </answer>.",
    ]
    for _ in range(size):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        op = rng.choice("+-*")
        value = a + b if op == "+" else a - b if op == "-" else a * b
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        kind = rng.randrange(4)
        if kind == 3:
            words = " ".join(rng.choice(_WORDS) for _ in range(12))
            lines.append(f"{name.lower()} {words} {a} {item}, {b}% {op} ${value}.")
        elif kind == 0:
            lines.append(
                f"What is {a} {op} {b}? <think>{a} {op} {b} = {value}</think> "
                f"<answer>{value}</answer>"
            )
        elif kind == 1:
            lines.append(
                f"{name} has {a} {item}. {name} buys {b} more {item}. How many {item} does "
                f"{name} have now?\n{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {item}."
                f"\n#### {a + b}"
            )
        else:
            lines.append(
                f"{name} sold {a} {item} in April, and then {b} times as many in May. How many "
                f"did {name} sell in May? <think>{name} sold {a} * {b} = {a * b} {item}."
                f"</think>\n<answer>{a * b}</answer>"
            )
    return lines


def build_tokenizer(corpus: list[str] | None = None, *, vocab_size: int = 512):
    """A ``PreTrainedTokenizerFast`` trained on ``corpus`` (default :func:`default_corpus`).

    ``vocab_size`` is the most tokens it will have, added tokens included; a small corpus may
    leave it with fewer (``len(tokenizer)`` is the real size).
    """
    n_bytes = len(pre_tokenizers.ByteLevel.alphabet())
    minimum = n_bytes + len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + added tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus if corpus is not None else default_corpus(), trainer=trainer)
    # Whole, never split, and kept by decode(skip_special_tokens=True).
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )


def build_tiny_model(
    out_dir: str | Path,
    *,
    vocab_size: int = 512,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    head_dim: int = 64,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    corpus: list[str] | None = None,
) -> Path:
    """Write a random-init Qwen2 causal LM and its freshly trained tokenizer to ``out_dir``.

    ``num_heads`` defaults to ``hidden_size // head_dim`` and must satisfy
    ``num_heads * head_dim == hidden_size`` (vLLM's Qwen2 derives the head size that way; its
    CPU attention needs ``head_dim`` of 64 or more, e.g. 64). The result depends only on the
    arguments (the global torch RNG is left untouched). Returns ``Path(out_dir)``.
    """
    if num_heads is None:
        num_heads = max(1, hidden_size // head_dim)
    if num_heads * head_dim != hidden_size:
        raise ValueError(
            f"num_heads * head_dim must equal hidden_size (got {num_heads} * {head_dim} != "
            f"{hidden_size}); vLLM's Qwen2 uses head_dim = hidden_size // num_heads"
        )
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim,  # type: ignore[call-arg]  # accepted through **kwargs
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).float()
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def write_gguf(model_dir: str | Path, path: str | Path, *, qtype: str = "F32") -> Path:
    """Export a tiny Qwen2 model directory (as :func:`build_tiny_model` writes) to a GGUF file.

    ``qtype`` is ``"F32"`` or ``"Q8_0"`` (2-D weights quantized; norms and biases stay F32).
    Meant for tests of GGUF loading; not a general converter. GGUF's Qwen2 metadata has no
    head size, so the model must have ``head_dim == hidden_size // num_heads``.
    """
    import gguf  # optional extra (rlvr[gguf]): only GGUF tests write one

    model_dir, path = Path(model_dir), Path(path)
    cfg = json.loads((model_dir / "config.json").read_text())
    tok_json = json.loads((model_dir / "tokenizer.json").read_text())
    tok_cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    if cfg["model_type"] != "qwen2":
        raise ValueError(f"write_gguf handles qwen2 models only (got {cfg['model_type']!r})")
    heads = cfg["num_attention_heads"]
    if cfg.get("head_dim", cfg["hidden_size"] // heads) * heads != cfg["hidden_size"]:
        raise ValueError("GGUF qwen2 needs head_dim == hidden_size // num_attention_heads")
    quant = {"F32": None, "Q8_0": gguf.GGMLQuantizationType.Q8_0}[qtype]

    vocab: dict[str, int] = dict(tok_json["model"]["vocab"])
    added = {t["content"]: t for t in tok_json["added_tokens"]}
    for content, t in added.items():
        vocab[content] = t["id"]
    n_vocab = cfg["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [gguf.TokenType.UNUSED] * n_vocab
    for content, idx in vocab.items():
        tokens[idx] = content
        if content in added:
            special = added[content]["special"]
            types[idx] = gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED
        else:
            types[idx] = gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_json["model"]["merges"]]

    arch = gguf.MODEL_ARCH.QWEN2
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(model_dir.name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_rope_freq_base(float(_rope_theta(cfg)))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if quant is None else gguf.LlamaFileType.MOSTLY_Q8_0
    )
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(cfg["eos_token_id"])
    writer.add_pad_token_id(cfg["pad_token_id"])
    writer.add_add_bos_token(False)
    if tok_cfg.get("chat_template"):
        writer.add_chat_template(tok_cfg["chat_template"])
    else:
        template = model_dir / "chat_template.jinja"
        if template.exists():
            writer.add_chat_template(template.read_text())

    names = gguf.get_tensor_name_map(arch, cfg["num_hidden_layers"])
    state = load_file(str(model_dir / "model.safetensors"))
    for hf_name, array in state.items():
        if cfg.get("tie_word_embeddings") and hf_name == "lm_head.weight":
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = names.get_name(base)
        if gguf_name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name!r}")
        data = np.ascontiguousarray(array.astype(np.float32))
        if quant is not None and data.ndim == 2 and data.shape[-1] % 32 == 0:
            packed = gguf.quants.quantize(data, quant)
            writer.add_tensor(f"{gguf_name}.{suffix}", packed, raw_dtype=quant)
        else:
            writer.add_tensor(f"{gguf_name}.{suffix}", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _rope_theta(cfg: dict) -> float:
    if "rope_theta" in cfg:
        return cfg["rope_theta"]
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return params.get("rope_theta", 10000.0)


__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "TAG_TOKENS",
    "build_tiny_model",
    "build_tokenizer",
    "default_corpus",
    "write_gguf",
]
