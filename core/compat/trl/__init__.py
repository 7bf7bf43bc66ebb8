"""TRL compatibility: everything TRL-specific, as TRL 1.16 defines it.

- the ``GRPOConfig`` keys: :mod:`~rlvr.compat.trl.keys` (the table, declared data),
  :mod:`~rlvr.compat.trl.values` (value translations), :mod:`~rlvr.compat.trl.paste` (one block
  being translated) and :mod:`~rlvr.compat.trl.translate` (the config loader's entry point);
- ``rlvr import-trl``: :mod:`~rlvr.compat.trl.importer`, reading the script with
  :mod:`~rlvr.compat.trl.script`, :mod:`~rlvr.compat.trl.read`,
  :mod:`~rlvr.compat.trl.read_rewards` and :mod:`~rlvr.compat.trl.read_data`;
- TRL's reward-calling convention: :mod:`~rlvr.compat.trl.reward_call`;
- TRL's ``environment_factory`` convention: :mod:`~rlvr.compat.trl.environment`.

This package imports none of them: the config loader imports the translator, and the
importer imports the config loader.
"""
