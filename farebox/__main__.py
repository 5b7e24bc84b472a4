import sys

from farebox.cli import main

sys.exit(main())
