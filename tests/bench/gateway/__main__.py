"""``python -m tests.bench.gateway`` (``make bench``): see the package docstring."""

import sys

from tests.bench.gateway.run import main

sys.exit(main())
