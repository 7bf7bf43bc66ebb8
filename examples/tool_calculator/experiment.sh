#!/usr/bin/env bash
# The whole experiment of docs/experiments/smollm2-calculator.md: the baselines (the base model
# without the tool and with it, greedy and sampled), then for each seed a run of the recipe
# (examples/tool_calculator_smollm2.yaml) and its evals, then the tables. Everything lands under
# OUT (default outputs/calc). About 20-25 minutes a seed on 2 AVX2-only CPU cores (14-21 of
# training, 6 of evals), and 15 for the baselines.
#
#   bash examples/tool_calculator/experiment.sh                  # seeds 0 1 2
#   SEEDS="3" OUT=outputs/calc_bf16 EXTRA="--set model.dtype=bfloat16" bash examples/tool_calculator/experiment.sh
#
# What is already there (a finished run, an eval) is not redone: a stopped experiment goes on.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=examples/tool_calculator_smollm2.yaml
OUT=${OUT:-outputs/calc}
SEEDS=${SEEDS:-0 1 2}
read -r -a EXTRA <<< "${EXTRA:-}"
[ -f examples/models/SmolLM2-135M-Instruct.Q4_1.gguf ] || bash examples/fetch_smollm2.sh
[ -f examples/tool_calculator/data/3x2/test.jsonl ] || python examples/tool_calculator/make_data.py 3x2

evals() {  # evals ARGS... DIR: greedy and sampled (the training temperature), one answer a question
    local dir=${*: -1} args=("${@:1:$#-1}")
    [ -f "$dir/greedy/summary.json" ] ||
        rlvr eval "$CONFIG" "${EXTRA[@]}" "${args[@]}" --greedy --output "$dir/greedy"
    [ -f "$dir/sampled/summary.json" ] ||
        rlvr eval "$CONFIG" "${EXTRA[@]}" "${args[@]}" --output "$dir/sampled"
}

# the base model without the tool: single completions, one worked pair, the answer tags
evals --set environment=null \
    --set 'data.few_shot=[{user: "What is 1234 * 56?", assistant: "<answer>69104</answer>"}]' \
    --set 'data.system_prompt=Give the final answer inside <answer></answer> tags.' \
    "$OUT/no_tool"
evals "$OUT/before"   # the base model with the tool and the recipe's prompt
for seed in $SEEDS; do
    run=$OUT/seed$seed
    [ -f "$run/run/run_summary.json" ] ||
        rlvr train "$CONFIG" "${EXTRA[@]}" --set training.seed="$seed" --set training.output_dir="$run/run"
    evals --checkpoint "$run/run" "$run/after"
done
for mode in greedy sampled; do
    echo "## $mode"
    python examples/tool_calculator/report.py "$OUT/before/$mode" "$OUT"/seed*/after/$mode
done
