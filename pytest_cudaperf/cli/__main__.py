"""``python -m pytest_cudaperf.cli``: the ``cudaperf`` command."""

import sys

from pytest_cudaperf.cli import main

sys.exit(main())
