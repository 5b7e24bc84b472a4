"""``python -m tests.bench.finance`` (``make bench-finance``): see the package docstring."""

import sys

from tests.bench.finance.run import main

sys.exit(main())
