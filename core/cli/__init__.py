"""The ``rlvr`` command line and the ``rlvr new plugin`` scaffold: thin layers that parse
arguments and call the library."""
