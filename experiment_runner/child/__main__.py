"""`python -m experiment_runner.child TASK`: one experiment in this process.

It ends with os._exit(), as a fork server's child does: once the result is published,
nothing (a library's non-daemon thread, an exit handler) may keep the process alive, so
both launchers see the same child end the same way.
"""

import os
import sys
import traceback

from experiment_runner.child.main import main

code = 1
try:
    code = main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
except BaseException:  # noqa: BLE001 - the log must say why, and the exit must not wait
    traceback.print_exc()
finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
