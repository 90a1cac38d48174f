"""``python -m online_trainer``: the ``online-trainer`` command."""

import sys

from online_trainer.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
