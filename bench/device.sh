#!/usr/bin/env bash
# The GPU checks, prepared as one command for a GPU host that has torch, transformers, peft,
# accelerate, pyarrow and pluggy but no package index (the machines some sessions are lent).
#
#   bash bench/device.sh fetch                    # here: the missing wheels into .whl/
#   bash bench/device.sh run [tests bench example] # there, from the repo root, .whl/ carried
#
# `run` installs the wheels and rlvr into /tmp/site, then runs the parts named (all three by
# default; logs and results under $OUT, else ./device-out):
#   tests    every test file that trains, evaluates or generates: training picks CUDA when it
#            sees a GPU, so these run the CUDA path (float32 trained weights, bfloat16 autocast,
#            fused AdamW). RLVR_TESTS names other test files.
#   bench    bench/vs_trl.py --device cuda: rlvr vs TRL's GRPOTrainer on identical work,
#            bfloat16 autocast in both. RLVR_BENCH_MODELS picks the models (default, the
#            open questions first: vocab150k (the lean head's GPU memory), smollm2 when its
#            GGUF is there (TRL's row is missing), qwen0.5b-shape, tiny). RLVR_BENCH_ARGS adds
#            arguments (default --rlvr-rows: rlvr once more without packing a group behind
#            its prompt, to see whether packing is what makes rlvr's training part slower than
#            TRL's on a GPU; set it empty to skip that run).
#   example  examples/gsm8k_smollm2.yaml with the hf backend for RLVR_EXAMPLE_MINUTES (default
#            2) of wall time, greedy in-training eval on the first RLVR_EXAMPLE_EVAL (96) test
#            questions at the start and the end (the budget keeps room for the closing
#            eval) in calls of RLVR_EXAMPLE_EVAL_BATCH (default: all of them at once; the
#            H200 run in calls of 16 took 63 s for 96 questions); needs
#            examples/models/SmolLM2-135M-Instruct.Q4_1.gguf (93 MB: copy it there first
#            where the repo travels without it).
# RLVR_DEVICE=cpu runs the same on the CPU (tiny model only), to check the script itself.
# RLVR_TESTS_TIMEOUT and RLVR_BENCH_TIMEOUT (seconds, default 200 and 450) bound those parts, so
# that a short lease is not spent on one of them; a second `run` on the same machine skips
# the install when /tmp/site already holds rlvr and the .whl/ folder is gone (RLVR_INSTALL=1
# forces it).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the GPU image lacks: rlvr's and TRL's pure-Python needs (pydantic-core is compiled).
WHEELS=(pydantic pydantic-core annotated-types typing-inspection math-verify
        latex2sympy2-extended antlr4-python3-runtime datasets dill multiprocess gguf)
TRL="trl==1.16.0"
GGUF=examples/models/SmolLM2-135M-Instruct.Q4_1.gguf

fetch() {
  mkdir -p .whl
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  local pins=("$TRL")
  for name in "${WHEELS[@]}"; do  # the versions tested here
    pins+=("$name==$(python -c "import importlib.metadata as m; print(m.version('$name'))")")
  done
  # The GPU image's Python is 3.12; RLVR_WHEEL_PYTHON=3.11 fetches for this one (a CPU check).
  python -m pip download -q --no-deps --only-binary=:all: \
    --python-version "${RLVR_WHEEL_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
  ls -l .whl
}

tests() {
  # 222 tests, 30 s on 2 CPU cores, 59 s on an H200 host.
  local files="${RLVR_TESTS:-tests/test_precision.py tests/test_lora.py tests/test_trainer.py
    tests/test_trainer_family.py tests/test_update.py tests/test_run_models.py
    tests/test_train_eval.py tests/test_evaluate.py tests/test_backend_hf.py
    tests/test_algorithms_family.py tests/test_sampler_correction.py
    tests/test_training_keys.py tests/test_modeling.py tests/test_logprobs.py
    tests/test_guidance.py}"
  # shellcheck disable=SC2086
  timeout "${RLVR_TESTS_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -m "not slow and not vllm" -rfE $files \
    2>&1 | tee "$out/tests.log" | tail -40
}

bench() {
  local models=vocab150k,qwen0.5b-shape,tiny
  [ -f "$GGUF" ] && models=vocab150k,smollm2,qwen0.5b-shape,tiny
  [ "$device" = cuda ] || models=tiny
  # shellcheck disable=SC2086  # RLVR_BENCH_ARGS splits into arguments
  timeout "${RLVR_BENCH_TIMEOUT:-450}" python3 bench/vs_trl.py --device "$device" --trl-python python3 \
    --models "${RLVR_BENCH_MODELS:-$models}" --steps 3 --warmup 1 --prompts 4 --generations 8 \
    --max-completion-length 256 ${RLVR_BENCH_ARGS---rlvr-rows} --json "$out/vs_trl.json" 2>&1 \
    | tee "$out/vs_trl.md"
}

example() {
  [ -f "$GGUF" ] || { echo "example: $GGUF is missing, skipped"; return; }
  local minutes="${RLVR_EXAMPLE_MINUTES:-2}" questions="${RLVR_EXAMPLE_EVAL:-96}"
  local eval_batch="${RLVR_EXAMPLE_EVAL_BATCH:-$questions}"
  local run=/tmp/rlvr-example
  rm -rf "$run"
  timeout $((minutes * 60 + 90)) python3 -m rlvr train examples/gsm8k_smollm2.yaml \
    --set backend.name=hf --set training.max_minutes="$minutes" \
    --set training.output_dir="$run" --set training.save_steps=1000 \
    --set training.eval_steps=1000 --set training.eval_limit="$questions" \
    --set training.eval_batch_size="$eval_batch" 2>&1 \
    | tr '\r' '\n' | grep -v 'it/s]$' | tee "$out/example.log" | tail -20
  cp "$run/metrics.jsonl" "$out/example_metrics.jsonl" || true
}

run() {
  device="${RLVR_DEVICE:-cuda}" out="${OUT:-device-out}"
  local site=/tmp/site parts=("$@")
  [ ${#parts[@]} -gt 0 ] || parts=(tests bench example)
  mkdir -p "$out"
  if [ -d .whl ] || [ ! -d "$site/rlvr" ] || [ -n "${RLVR_INSTALL:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" .whl/*.whl
    # rlvr itself (not editable: its entry points must be found on the path)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
      --target "$site" .
  fi
  export PYTHONPATH="$site" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
  python3 -c "import torch, rlvr; print('torch', torch.__version__, torch.cuda.is_available())" \
    | tee "$out/env.txt"
  if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total --format=csv | tee -a "$out/env.txt"
  fi
  set +e
  for part in "${parts[@]}"; do
    case "$part" in
      tests|bench|example) echo "== $part"; "$part" ;;
      *) echo "unknown part: $part (tests, bench or example)" >&2; exit 2 ;;
    esac
  done
}

case "${1:-}" in
  fetch) fetch ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash bench/device.sh fetch | run [tests bench example]" >&2; exit 2 ;;
esac
