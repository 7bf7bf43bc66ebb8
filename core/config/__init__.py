"""The run config: the typed sections of one YAML file, how a problem in it is worded, and
the TRL ``GRPOConfig`` keys it accepts. Validated as a whole before any model loads."""
