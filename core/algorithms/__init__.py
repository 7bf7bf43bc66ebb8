"""What every policy-gradient algorithm builds on: :class:`PolicyGradient` (one implementation
of prepare/loss on :mod:`rlvr.functional`) and its params model. Built-in and third-party
algorithm plugins subclass these through ``import rlvr``."""
