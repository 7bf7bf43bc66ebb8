"""Build the calculator demo's tiny model and data, offline and deterministically.

    python examples/calculator/make_model.py     # writes examples/models/tiny-calculator/
                                                 # and examples/calculator/data/{train,test}.jsonl

The task: two-digit products, asked as "What is 37 * 84?" (row field ``question``), gold "3108"
(row field ``answer``). A model this small cannot multiply; it can copy. The episode runs in the
``tools`` environment with the ``calculator`` tool: the model may write

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "37 * 84"}}
    </tool_call>

get back ``<tool_response>3108</tool_response>`` and then answer ``<answer>3108</answer>``, or
it may answer at once (a guess, right about 1 time in 8000).

The (a, b) pairs with 10 <= a, b <= 99 are cut into three pools disjoint by product (every
pair of a product in one pool): the warm-up's, the training split's (``train.jsonl``) and the
held-out split's (``test.jsonl``). No product of the training or held-out split is ever seen
before RL, and the held-out products are never trained on at all: a model right on them uses
the tool.

The model: a random-init tiny Qwen2 (:func:`rlvr.build_tiny_model`, 4 heads of 32, 2 layers)
with a BPE tokenizer trained on the task's text plus ``<tool_call>``, ``</tool_call>``,
``<tool_response>``, ``</tool_response>``, ``<tools>``, ``</tools>`` as whole tokens, and a
Hermes/Qwen-style chat template (:data:`CHAT_TEMPLATE`): the tools' JSON schemas in a system
turn inside ``<tools>``, a ``tool`` message as a user turn inside ``<tool_response>``.

The warm-up is supervised, on the warm-up pool only: the whole network is fitted to episodes of
both kinds, ``COPY_SHARE`` of them the tool-using one (to learn to copy the operands into the
call and the result into the answer) and the rest a direct ``<answer>`` with a random number (a
wrong guess). Loss is on the assistant's tokens only, and on the first of them it is fitted to
the distribution "``<tool_call>`` with probability ``TOOL_P``, else ``<answer>``", whatever the
question. On 200 training questions it has not seen, the result calls the tool with
probability 0.26, writes the call right 99% of the time and copies the result right 44% of the
time (teacher-forced, token for token), and guesses otherwise: its reward starts near 0.1,
and RL (``rlvr train examples/calculator/calculator.yaml``) has to learn that calling pays
(and to copy better). Its 500 steps take about 4 minutes on one thread.

Everything is seeded and runs on one thread, so the files written are the same on every run.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL_DIR = HERE.parent / "models" / "tiny-calculator"
DEFAULT_DATA_DIR = HERE / "data"

MODEL_KWARGS = dict(
    vocab_size=400,
    hidden_size=128,
    num_layers=2,
    num_heads=4,
    head_dim=32,
    intermediate_size=256,
    tie_word_embeddings=False,
)
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
TOOLS_TAGS = ("<tools>", "</tools>")
INIT_STD = 0.1
WARM_UP = dict(steps=500, batch=32, lr=3e-3)
#: the share of warm-up episodes that call the tool and copy (the rest guess).
COPY_SHARE = 0.75
#: the probability of calling the tool that the warm-up fits (on the first assistant token).
TOOL_P = 0.25
POOLS = dict(warmup=2000, train=2000, test=200)

#: Hermes/Qwen2.5-style tool rendering, ChatML turns. An assistant message whose text already
#: holds its ``<tool_call>`` (what a model writes, and what rlvr passes back) is rendered as
#: written; one with only structured ``tool_calls`` gets them written out.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n' }}"
    "{%- endif %}"
    '{{- \'You may call a tool: <tool_call>\\n{"name": <name>, "arguments": <object>}\\n'
    "</tool_call>\\n<tools>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- '</tools><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and tools and loop.first %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- if message.tool_calls and '<tool_call>' not in (message.content or '') %}"
    "{%- for call in message.tool_calls %}"
    "{{- '<tool_call>\\n' + {'name': call.function.name, 'arguments': "
    "call.function.arguments} | tojson + '\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def pools(seed: int) -> dict[str, list[dict[str, str]]]:
    """Pools of "What is a * b?" questions (10 <= a, b <= 99) disjoint by PRODUCT: all the
    pairs of a product go to one pool, so no held-out product is the answer to a training or
    warm-up question (12 * 36 and 18 * 24 land together). Products are dealt in a seeded random
    order, each pool filled to about its ``POOLS`` size (held out first)."""
    rng = random.Random(seed)
    by_product: dict[int, list[tuple[int, int]]] = {}
    for a in range(10, 100):
        for b in range(10, 100):
            by_product.setdefault(a * b, []).append((a, b))
    products = sorted(by_product)
    rng.shuffle(products)
    out: dict[str, list[dict[str, str]]] = {name: [] for name in POOLS}
    order = ["test", "train", "warmup"]
    k = 0
    for name in order:
        while len(out[name]) < POOLS[name] and k < len(products):
            out[name] += [row(a, b) for a, b in by_product[products[k]]]
            k += 1
        rng.shuffle(out[name])
    return out


def row(a: int, b: int) -> dict[str, str]:
    return {"question": f"What is {a} * {b}?", "answer": str(a * b)}


def tool_call_text(question: str) -> str:
    """The call the warm-up teaches: the question's expression, verbatim."""
    expression = question.removeprefix("What is ").removesuffix("?")
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def corpus(rows: list[dict[str, str]], schema_line: str) -> list[str]:
    """Text the tokenizer is trained on: the questions, tool calls, answers and the schema."""
    lines = ["0 1 2 3 4 5 6 7 8 9 + - * / = ( ) ?", "user assistant system", schema_line]
    lines += [
        f"{r['question']} {tool_call_text(r['question'])} <answer>{r['answer']}</answer>"
        for r in rows
    ]
    return lines * 2  # BPE merges a pair only when it appears at least twice


def add_tokens(model_dir: Path) -> None:
    """``TOOL_TOKENS`` and ``TOOLS_TAGS`` as whole, non-special tokens (decoding keeps them,
    so the tool-call parser sees them), and the chat template."""
    from tokenizers import AddedToken
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.add_tokens(
        [AddedToken(t, normalized=False, special=False) for t in TOOL_TOKENS + TOOLS_TAGS]
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    model.save_pretrained(model_dir, safe_serialization=True)


def episode_text(
    tok: Any, tools: list[dict[str, Any]], r: dict[str, str], guess: str | None
) -> tuple[list[int], list[int]]:
    """Token ids of one warm-up episode and its loss mask (1 on the assistant's tokens): a
    tool-using one when ``guess`` is None, else a direct answer ``guess``. The ids are the
    template's, turn by turn, as the episode runner builds them."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": r["question"]}]
    ids: list[int] = []
    mask: list[int] = []

    def extend(text: str, learn: int) -> None:
        new = tok(text, add_special_tokens=False)["input_ids"]
        ids.extend(new)
        mask.extend([learn] * len(new))

    def render(messages: list[dict[str, Any]]) -> str:
        return str(
            tok.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
        )

    before = render(msgs)
    extend(before, 0)
    turns = [tool_call_text(r["question"]), f"<answer>{r['answer']}</answer>"]
    if guess is not None:
        turns = [f"<answer>{guess}</answer>"]
    for k, turn in enumerate(turns):
        extend(turn + "<|im_end|>", 1)
        if k + 1 < len(turns):  # the tool's reply: what the template adds after the turn
            msgs.append({"role": "assistant", "content": turn})
            msgs.append({"role": "tool", "name": "calculator", "content": r["answer"]})
            after = render(msgs)
            sampled = before + turn + "<|im_end|>"
            assert after.startswith(sampled), (after, sampled)
            extend(after[len(sampled) :], 0)
            before = after
    return ids, mask


def warm_up(
    model_dir: Path, splits: dict[str, list[dict[str, str]]], tools: list[dict[str, Any]], seed: int
) -> dict[str, float]:
    """Re-draw the weights, fit the whole network to warm-up episodes (module docstring), save;
    returns the warm-up's final loss and how the result copies (:func:`copy_rates`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.dim() == 2:
                param.normal_(0.0, INIT_STD, generator=g)
    rng = random.Random(seed)
    rows = splits["warmup"]
    guesses = [None if rng.random() < COPY_SHARE else str(rng.randint(100, 9999)) for _ in rows]
    data = [episode_text(tok, tools, r, guess) for r, guess in zip(rows, guesses, strict=True)]
    call_id = tok.convert_tokens_to_ids("<tool_call>")
    answer_id = tok.convert_tokens_to_ids("<answer>")

    opt = torch.optim.AdamW(model.parameters(), lr=WARM_UP["lr"], weight_decay=0.0)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(WARM_UP["steps"]):
        ids, labels, attn, first = _batch(tok, rng.sample(data, WARM_UP["batch"]))
        lr = WARM_UP["lr"] * min(1.0, (step + 1) / 50)
        for group in opt.param_groups:
            group["lr"] = lr
        logp = model(input_ids=ids, attention_mask=attn).logits[:, :-1].log_softmax(-1)
        target = labels[:, 1:]
        learn = target != -100
        learn[torch.arange(len(first)), first - 1] = False  # the decision: below
        nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)[learn].mean()
        decide = logp[torch.arange(len(first)), first - 1]
        decision = -(TOOL_P * decide[:, call_id] + (1 - TOOL_P) * decide[:, answer_id]).mean()
        loss = nll + decision
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"warm-up step {step}: loss {loss.item():.3f}", flush=True)
    model.eval()
    model.save_pretrained(model_dir, safe_serialization=True)
    check = [episode_text(tok, tools, r, None) for r in splits["train"][:200]]
    return {"loss": loss.item(), **copy_rates(model, tok, check, call_id)}


def _batch(tok: Any, batch: list[tuple[list[int], list[int]]]) -> tuple[Any, Any, Any, Any]:
    """Right-padded ids, labels (-100 off the assistant's tokens), attention mask, and the
    position of each episode's first assistant token."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), tok.pad_token_id)
    labels = torch.full((len(batch), width), -100)
    attn = torch.zeros_like(ids)
    for k, (seq, mask) in enumerate(batch):
        ids[k, : len(seq)] = torch.tensor(seq)
        attn[k, : len(seq)] = 1
        labels[k, : len(seq)] = torch.tensor(
            [t if m else -100 for t, m in zip(seq, mask, strict=True)]
        )
    first = torch.tensor([mask.index(1) for _, mask in batch])
    return ids, labels, attn, first


def copy_rates(
    model: Any, tok: Any, episodes: list[tuple[list[int], list[int]]], call_id: int
) -> dict[str, float]:
    """On tool-using episodes of questions the warm-up never saw: the probability of calling
    the tool, and how often greedy decoding writes the call, and then the answer, token for
    token right (teacher-forced: each turn's tokens are the argmax given the right ones)."""
    import torch

    ids, labels, attn, first = _batch(tok, episodes)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    p_call = logits[torch.arange(len(first)), first - 1].softmax(-1)[:, call_id].mean().item()
    right = logits.argmax(-1) == labels[:, 1:]
    calls = answers = 0
    for k, (_, mask) in enumerate(episodes):
        turns = [j - 1 for j in range(1, len(mask)) if mask[j]]
        split = next(i for i in range(1, len(turns)) if turns[i] != turns[i - 1] + 1)
        calls += bool(right[k, turns[1:split]].all())  # past the decision token
        answers += bool(right[k, turns[split:]].all())
    return {
        "p_call": p_call,
        "call_right": calls / len(episodes),
        "answer_right": answers / len(episodes),
    }


def calculator_tool() -> tuple[Any, dict[str, Any]]:
    """The ``tools`` environment's calculator and its JSON schema, through the plugin host (so
    the warm-up shows the model exactly the schema training offers)."""
    import rlvr

    record = rlvr.create_host().environments["tools"]
    env = record.factory(record.params(tools=["calculator"]), rlvr.plugin.RunInfo(32, 1))
    return env.functions["calculator"], env.schemas[0]


def write_data(splits: dict[str, list[dict[str, str]]], data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train", "test"):
        with open(data_dir / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for r in splits[name]:
                f.write(json.dumps(r) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from rlvr import build_tiny_model

    t0 = time.perf_counter()
    torch.set_num_threads(1)  # the same bytes whatever the core count
    splits = pools(args.seed)
    write_data(splits, args.data_dir)
    tools = [calculator_tool()[1]]
    if args.model_dir.exists():
        shutil.rmtree(args.model_dir)
    text = corpus(splits["warmup"], json.dumps(tools[0]))
    build_tiny_model(args.model_dir, seed=args.seed, corpus=text, **MODEL_KWARGS)
    add_tokens(args.model_dir)
    got = warm_up(args.model_dir, splits, tools, args.seed)
    print(
        f"wrote {args.model_dir} (warm-up loss {got['loss']:.3f}; on unseen questions: "
        f"p(call) {got['p_call']:.2f}, call copied right {got['call_right']:.0%}, "
        f"answer copied right {got['answer_right']:.0%})"
    )
    print(
        f"wrote {args.data_dir}/train.jsonl ({len(splits['train'])}) and test.jsonl "
        f"({len(splits['test'])}); their products and the warm-up's ({len(splits['warmup'])}) "
        "are disjoint"
    )
    print(f"done in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
