"""``python -m rlvr``: the ``rlvr`` command (``torchrun -m rlvr train run.yaml`` needs it)."""

import sys

from rlvr.cli.main import main

sys.exit(main())
