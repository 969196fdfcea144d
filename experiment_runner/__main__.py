import sys

from experiment_runner.cli import main

sys.exit(main())
