#!/usr/bin/env bash
# The whole experiment of docs/experiments/smollm2-reasoning-gym.md, from nothing to its tables
# and figure: the base model's evals, then for each seed a run of the recipe
# (examples/reasoning_gym_smollm2.yaml) and its evals, then the report. Everything lands under
# OUT (default outputs/rg). About 24 minutes a seed on 2 CPU cores (14 of training, 10 of evals).
#
#   bash examples/reasoning_gym_experiment.sh                # seeds 1 2 3
#   SEEDS="1" OUT=outputs/rg1 bash examples/reasoning_gym_experiment.sh
#
# What is already there (a finished run, an eval) is not redone: a stopped experiment goes on.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=examples/reasoning_gym_smollm2.yaml
OUT=${OUT:-outputs/rg}
SEEDS=${SEEDS:-1 2 3}
[ -f examples/models/SmolLM2-135M-Instruct.Q4_1.gguf ] || bash examples/fetch_smollm2.sh

evals() {  # evals CHECK MODEL_ARGS... DIR: greedy (one answer a problem) and 8 samples a problem
    local check=$1; shift
    local dir=${*: -1} args=("${@:1:$#-1}")
    [ -f "$dir/greedy/summary.json" ] || rlvr eval "$CONFIG" "${args[@]}" --greedy --output "$dir/greedy"
    [ -f "$dir/sampled/summary.json" ] || rlvr eval "$CONFIG" "${args[@]}" -k 8 --output "$dir/sampled"
    # the training-set check (the first seed only): 200 training problems, 8 samples each
    [ "$check" = 0 ] || [ -f "$dir/train/summary.json" ] ||
        rlvr eval "$CONFIG" "${args[@]}" --split train --limit 200 -k 8 --output "$dir/train"
}

evals 1 "$OUT/before"
first=${SEEDS%% *}
for seed in $SEEDS; do
    run=$OUT/seed$seed
    [ -f "$run/run/run_summary.json" ] ||
        rlvr train "$CONFIG" --set training.seed="$seed" --set training.output_dir="$run/run"
    evals "$([ "$seed" = "$first" ] && echo 1 || echo 0)" --checkpoint "$run/run" "$run/after"
done
python examples/reasoning_gym_report.py "$OUT"
