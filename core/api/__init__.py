"""What a plugin sees of rlvr: the hook specs, the records a plugin registers, the runtime
interfaces its factories return, and the host that discovers plugins through the ``rlvr``
entry-point group. Light: nothing here imports torch."""
