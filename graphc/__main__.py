"""``python -m graphc``: the same command line as the ``graphc`` console script, for
environments where the script's directory is not on ``PATH``."""

import sys

from .cli import main

sys.exit(main())
