"""Inside the minifier's process: dump, shrink and check one red experiment's failing graph.

Run as `python -m experiment_runner.child.minify TASK_PATH` in a folder of the experiment's
own (core/minify.py FOLDER) holding the task and a `MinifyJob`. Three steps, each with what
it needs fresh: (1) here, the experiment's model is loaded and its compiled step run once
under torch._dynamo's repro settings, which dump `minifier_launcher.py` when the symptom
shows; (2) the launcher runs in its own interpreter (it compiles again) and shrinks the graph,
leaving `repro.py` in its working folder; (3) `repro.py` runs in a fresh interpreter, and
its exceptions say whether it reproduces. The result goes to RESULT_FILE; the parent turns
it into the record's `minified` block, and kills this process group at its time budget. With
`--check`, step (3) alone, on the last checkpoint of a minification killed at its budget.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from experiment_runner.core.minify import (
    CHECK_LOG,
    CHECK_RESULT_FILE,
    JOB_FILE,
    MINIFIER_LOG,
    REPRO_FILE,
    RESULT_FILE,
    WORK_FOLDER,
    MinifyJob,
    exception_names,
    kept_nodes,
    nodes_before,
    shows_symptom,
)
from experiment_runner.core.protocol import Task, write_result


def dump_launcher(task: Task, job: MinifyJob, debug_root: Path) -> tuple[Path | None, str | None]:
    """Run the experiment's compiled step once under the repro settings; the launcher dynamo
    dumped (None when the symptom did not show) and the exception the step raised."""
    import torch

    from experiment_runner.child.devices import runtime_for
    from experiment_runner.child.driver import ExperimentDriver, apply_denormal_mode, apply_matmul_precision
    from experiment_runner.child.plugins import import_plugins

    import_plugins()
    torch._dynamo.config.repro_after = job.repro_after
    torch._dynamo.config.repro_level = job.repro_level
    torch._dynamo.config.debug_dir_root = str(debug_root)
    # A cache hit skips compiling, and with it the minifier's check.
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    apply_matmul_precision(task.options)
    apply_denormal_mode(task.options)
    device = runtime_for(task.experiment.config)
    device.prepare(task.options, Path(task.artifacts_dir))
    driver = ExperimentDriver(task.experiment, task.options, device, Path(task.artifacts_dir))
    raised = None
    try:
        model = driver.load()
        step = driver.make_step(model)
        step()
        device.synchronize()
    except Exception as exc:  # noqa: BLE001 - the symptom we came for, or another failure: the result says
        raised = type(exc).__name__
        print(f"experiment_runner minify: the step raised {raised}: {str(exc)[:2000]}", flush=True)
    launchers = sorted(glob.glob(str(debug_root / "**" / "minifier_launcher.py"), recursive=True))
    return (Path(launchers[-1]) if launchers else None), raised


def quote_environment(script: Path, env: Mapping[str, str]) -> None:
    """Quote the environment PyTorch pastes into a launcher or repro it generates: it writes
    `os.environ['KEY'] = 'VALUE'` with VALUE's single quotes turned double and nothing else
    escaped, so our cache folder's path with a newline breaks the script (a SyntaxError: the
    experiment reads as no_repro) and one with a quote names another folder. Each such line of
    `env` (the environment the script was generated in) is written again as Python's literal."""
    text = script.read_text()
    quoted = text
    for key, value in env.items():
        pasted = f"""os.environ['{key}'] = '{value.replace("'", '"')}'"""
        quoted = quoted.replace(pasted, f"os.environ[{key!r}] = {value!r}")
    if quoted != text:
        script.write_text(quoted)


def run_logged(command: list[str], cwd: Path, log: Path) -> tuple[int, str]:
    """Run `command` in `cwd`, in this process group; its output goes to `log` as it comes (the
    parent reads a killed minifier's progress there) and is returned."""
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        code = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    return code, log.read_text(errors="replace")


def minify(task: Task, job: MinifyJob) -> dict[str, Any]:
    folder = Path(task.artifacts_dir)
    result: dict[str, Any] = {"status": "failed", "nodes_before": None, "nodes_after": None, "reproduces": None,
                              "observed": [], "message": None, "launcher_s": None, "check_s": None}
    launcher, raised = dump_launcher(task, job, folder / "debug")
    result["dump_raised"] = raised
    if launcher is None:
        result.update(status="no_launcher", message=(
            f"no minifier_launcher.py was dumped at repro level {job.repro_level} after {job.repro_after}: the "
            + ("minifier's own accuracy check (against float64, torch._dynamo.config.repro_tolerance) passed"
               if job.kind == "accuracy" else f"compiling and running the graph did not raise (the step raised "
                                               f"{raised or 'nothing'})")))
        return result
    result["launcher"] = str(launcher)
    quote_environment(launcher, os.environ)
    work = folder / WORK_FOLDER
    t0 = time.perf_counter()
    code, output = run_logged([sys.executable, str(launcher)], work, folder / MINIFIER_LOG)
    result["launcher_s"] = time.perf_counter() - t0
    result["nodes_before"] = nodes_before(output)
    result["nodes_after"] = kept_nodes(output, work / "checkpoints")
    if not (work / REPRO_FILE).exists():
        result.update(status="no_repro", message=f"the launcher exited {code} without writing {REPRO_FILE} "
                                                 "(minifier.log says why)")
        return result
    # beside the logs; its checkpoints (inputs) stay in the work folder
    shutil.copyfile(work / REPRO_FILE, folder / REPRO_FILE)
    checked = check(folder, job)
    result.update(checked, status="reproduced" if checked["reproduces"] else "not_reproduced")
    return result


def check(folder: Path, job: MinifyJob) -> dict[str, Any]:
    """Run the folder's repro.py in a fresh interpreter: whether it shows the job's symptom."""
    quote_environment(folder / REPRO_FILE, os.environ)  # the launcher's process pasted the same environment
    t0 = time.perf_counter()
    code, output = run_logged([sys.executable, str(folder / REPRO_FILE)], folder / "check", folder / CHECK_LOG)
    observed = exception_names(output)
    reproduces = shows_symptom(code, output, job.symptom)
    return {"reproduces": reproduces, "observed": sorted(set(observed)), "repro_exit_code": code,
            "check_s": time.perf_counter() - t0,
            "message": None if reproduces else f"repro.py in a fresh interpreter exited {code}, raising "
                                               f"{', '.join(dict.fromkeys(observed)) or 'nothing'}, not "
                                               f"{job.symptom}"}


def main(argv: list[str] | None = None) -> int:
    """`TASK_PATH`: minify, the answer in RESULT_FILE. `--check TASK_PATH`: only check the folder's
    repro.py (the checkpoint a minification killed at its budget left), the answer in CHECK_RESULT_FILE."""
    argv = sys.argv[1:] if argv is None else argv
    checking = argv[0] == "--check"
    task = Task.read(Path(argv[-1]))
    folder = Path(task.artifacts_dir)
    job = MinifyJob.from_dict(json.loads((folder / JOB_FILE).read_text()))
    print(f"experiment_runner minify: {'checking the last checkpoint of ' if checking else ''}"
          f"{task.experiment.experiment_id} ({job.kind} after {job.repro_after}, level {job.repro_level})",
          flush=True)
    try:
        result = check(folder, job) if checking else minify(task, job)
    except Exception as exc:  # noqa: BLE001 - the parent records it as the minification's failure
        result = {"status": "failed", "reproduces": None, "message": f"{type(exc).__name__}: {str(exc)[:2000]}"}
    write_result(folder / (CHECK_RESULT_FILE if checking else RESULT_FILE), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
