"""rlvr's built-in plugins: registered through the ``rlvr`` entry-point group like any other."""
