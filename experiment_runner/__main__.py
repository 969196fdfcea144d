"""`python -m experiment_runner`: the same command line as the `experiment_runner` script."""

import sys

from experiment_runner.cli import main

sys.exit(main())
