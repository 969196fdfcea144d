import sys

from experiment_runner.child.main import main

sys.exit(main())
