"""``python -m hoard_worker --code DIR``: see the package's docstring."""

import sys

from hoard_worker.worker import main

if __name__ == "__main__":
    sys.exit(main())
