"""The starter config ``rlvr init`` writes (``rlvr init --from-trl`` writes
:func:`rlvr.compat.trl.importer.import_trl`'s instead)."""

STARTER = """\
# A starter rlvr config: GRPO on a dataset of questions with known answers.
# Fill in the TODOs, then: rlvr validate THIS.yaml && rlvr train THIS.yaml
# Every key and its default: rlvr validate THIS.yaml --print
model:
  name_or_path: Qwen/Qwen2.5-0.5B-Instruct  # TODO: a hub id, a local directory or a .gguf file
  # lora: {}                       # uncomment to train LoRA adapters (pip install 'rlvr[lora]')
data:
  path: data/train.jsonl           # TODO: a .jsonl/.json/.parquet file, a directory or a hub id
  prompt_field: prompt             # the column with the question (a string or chat messages)
  # system_prompt: "Answer inside <answer></answer>."
  # eval_path: data/test.jsonl     # held-out prompts for rlvr eval (and training.eval_steps)
rewards:
  - name: answer                   # 1 when the extracted answer equals the row's `answer`
    params: {gold_field: answer}   # TODO: the column with the gold answer
  - name: format                   # <think>...</think><answer>...</answer>
    weight: 0.5
  # - name: callable               # a TRL reward function, called as TRL calls it
  #   params: {function: "my_rewards.py:accuracy_reward"}
algorithm:
  name: grpo
  params:
    beta: 0.0                      # > 0 adds a KL term to a reference model (costs memory)
backend:
  name: hf                         # vllm: faster sampling on a GPU (pip install 'rlvr[vllm]')
training:
  output_dir: outputs/run          # relative paths resolve against this file's directory
  learning_rate: 1.0e-6
  per_device_train_batch_size: 8   # prompts per step (TRL counts completions)...
  num_generations: 8               # ...each sampled this many times
  max_completion_length: 256
  max_steps: 500
  save_steps: 100
  # eval_steps: 50                 # evaluate on data.eval_path during training
# A GRPOConfig from a TRL script can go under a top-level `trl:` section instead, with TRL's
# keys and units (rlvr import-trl SCRIPT.py writes one for you).
"""
