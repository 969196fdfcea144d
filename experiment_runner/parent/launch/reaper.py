"""The run's reaper: when the runner goes away, however it goes, nothing it started stays.

A runner killed with SIGKILL cannot clean up after itself, and the parent-death signal
reaches only its direct children: an experiment's grandchildren (compile workers, a
data loader, anything that called setsid()) would be left running with parent 1. So each
run starts this small process (no torch, its own session, so neither Ctrl-C nor a
closed terminal reaches it). It blocks on a pipe whose only writer is the runner; the
kernel closes that pipe when the runner dies, and the reaper then kills every process
whose environment carries the run's token (core.process_groups: every experiment, its
descendants, the fork server and its children) and exits. A runner that ends normally
closes the pipe itself, after its own cleanup, so the reaper finds nothing to do.

Why not the alternatives: PR_SET_CHILD_SUBREAPER on the runner dies with the runner;
process groups recorded in the run folder for the next run to reap leave them running
until a next run comes, which may be never (cron stopped, disk full); cgroups are not
delegated to unprivileged users everywhere the runner runs.

Run as `python -m experiment_runner.parent.launch.reaper TOKEN` (by `start_reaper` only).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

from experiment_runner.core.process_groups import RUN_TOKEN_ENV, carrying, kill_all

# This runner's token: in the environment of every process it starts (never in its own).
RUN_TOKEN = secrets.token_hex(8)

_reaper: list[subprocess.Popen] = []


def start_reaper() -> None:
    """Start this run's reaper (once per process)."""
    if _reaper:
        return
    env = {k: v for k, v in os.environ.items() if k != RUN_TOKEN_ENV}
    _reaper.append(subprocess.Popen(
        [sys.executable, "-m", "experiment_runner.parent.launch.reaper", RUN_TOKEN], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True,
    ))


def stop_reaper(timeout_s: float = 10.0) -> None:
    """The runner is done: let the reaper sweep (it should find nothing) and wait for it."""
    while _reaper:
        process = _reaper.pop()
        try:
            assert process.stdin is not None
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def reap(token: str, rounds: int = 100) -> int:
    """SIGKILL every process carrying `token` until none is left; how many were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        targets = carrying(RUN_TOKEN_ENV, token)
        if not targets:
            break
        kill_all(targets)
        killed |= targets
        time.sleep(0.02)
    return len(killed)


def main(argv: list[str]) -> int:
    token = argv[0]
    while os.read(0, 65536):  # returns b"" once the runner, the pipe's only writer, is gone
        pass
    killed = reap(token)
    if killed:
        print(f"experiment_runner reaper: killed {killed} process(es) the runner left behind", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
