"""`python3 -m mocapline ...`: the same as the `mocapline` command."""

import sys

from mocapline.cli import main

sys.exit(main())
