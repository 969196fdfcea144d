"""The self-contained HTML page of `history --html` and `report --format html`.

One static file: CSS, JavaScript and data inline, no CDN, nothing fetched, so it works
opened from disk or served by any web server, and can be mailed or archived with the
nightly results. The data is compact (each series as integers, hundredths of a percent
of its median), and plots are drawn by `page.html`'s script as SVG only when they
scroll into view or a model is clicked, so 2,000 experiments x 365 nights stay fast.
A report page also carries its tables as HTML (static_tables), so a reader without
JavaScript (a mail client, lynx, grep) reads the same figures.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiment_runner.analysis.loader import speedup_method
from experiment_runner.errors import EXIT_RESULTS_IO, ReportError

RECORDS_ON_PAGE = 500  # newest changes whose records are embedded; the rest link to their file


def encode_series(values: np.ndarray) -> dict[str, Any] | None:
    """A series as {s: scale, v: [round((x / s - 1) * 10000) or null]}; None if empty."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return None
    scale = float(np.median(finite))
    if scale == 0:
        scale = 1.0
    with np.errstate(invalid="ignore"):
        ints = np.round((values / scale - 1.0) * 10000.0)
    return {"s": float(f"{scale:.6g}"), "v": [None if math.isnan(v) else int(v) for v in ints.tolist()]}


def _json_for_script(data: Any) -> str:
    """JSON that cannot end the <script> element it sits in."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\!--")


def render(data: dict[str, Any], tables: tuple[str, str] = ("", "")) -> str:
    """The page; `tables` are the dashboard rows and per-model tables already drawn (the script
    draws them where these are empty)."""
    template = resources.files("experiment_runner.analysis").joinpath("page.html").read_text(encoding="utf-8")
    return (template.replace("{{TITLE}}", html.escape(data["title"]))
            .replace("{{DASHBOARD_ROWS}}", tables[0]).replace("{{MODELS}}", tables[1])
            .replace("{{DATA}}", _json_for_script(data)))


def _num(value: float | None, digits: int, suffix: str = "") -> str:
    """As the page script's num(): '-' for a missing figure."""
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _row(cells: Sequence[tuple[str, str]], cls: str) -> str:
    tds = "".join(f'<td class="{c}">{html.escape(text)}</td>' if c else f"<td>{html.escape(text)}</td>"
                  for c, text in cells)
    return f'<tr class="{cls}">{tds}</tr>'


def pass_text(models: int, passed: int, checked: int) -> str:
    """The pass cell, as the script writes it: a model never checked is no pass, and is said."""
    if not checked:
        return "not checked"
    unchecked = f", {models - checked} not checked" if checked < models else ""
    return f"{passed}/{models} ({100 * passed / models:.0f}%{unchecked})"


def static_tables(data: dict[str, Any]) -> tuple[str, str]:
    """A one-run page's dashboard rows and per-model speedup tables as HTML, as the script
    draws them (same classes and figures), for readers that run no JavaScript."""
    rows = []
    for row in data["dashboard"]:
        models, passed, checked = row["models"][-1], row["passed"][-1], row["checked"][-1]
        method = {"paired": " paired", "harness": " harness", "mixed": " mixed"}.get(row["speedup_method"][-1], "")
        rows.append(_row([
            ("", row["suite"]), ("", row["accelerator"]), ("", row["test"]), ("", row["precision"]),
            ("", row["configuration"] + (" (baseline)" if row["baseline"] else "")),
            ("num", pass_text(models, passed, checked)),
            ("num speedup", "1.000x" if row["baseline"] else _num(row["speedup_geomean"][-1], 3, "x") + method),
            ("num", _num(row["compile_time_mean_s"][-1], 3)),
            ("num", "1.000x" if row["baseline"] else _num(row["memory_ratio_geomean"][-1], 3, "x"))], "dash-row"))
    groups: dict[str, tuple[list[str], dict[str, dict[str, str]]]] = {}
    for row in data["dashboard"]:
        if row["baseline"]:
            continue
        configs, cells = groups.setdefault(" / ".join(row[k] for k in ("suite", "accelerator", "test", "precision")),
                                           ([], {}))
        configs.append(row["configuration"])
        for e, speedup in zip(row["experiments"], row["speedups_latest"]):
            experiment = data["experiments"][e]
            cells.setdefault(experiment["model"], {})[row["configuration"]] = (
                experiment.get("cell") or _num(speedup, 2, "x"))
    tables = []
    for key, (configs, cells) in groups.items():
        head = "".join(f"<th>{html.escape(c)}</th>" for c in ["model", *configs])
        body = "".join(_row([("", model), *(("num", cells[model].get(c, "")) for c in configs)], "model-row")
                       for model in sorted(cells))
        tables.append(f"<h3>{html.escape(key)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "\n".join(rows), "\n".join(tables)


def write_page(path: Path, page: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {path}: {exc.strerror or exc}", EXIT_RESULTS_IO) from None


def link_to(file: Path, out: Path | None) -> str:
    """Where the page finds a results file: relative to the page when written to a file."""
    if out is None:
        return file.resolve().as_uri()
    return Path(os.path.relpath(file.resolve(), out.resolve().parent)).as_posix()


def report_page(run: Any, baseline: str, summaries: Sequence[dict[str, Any]],
                models: Sequence[dict[str, Any]]) -> str:
    """The page of one `report`: its dashboard table and per-model speedups (no trends: one run)."""
    experiments, dashboard, by_config = [], [], {}
    for m in models:
        key = (m["suite"], m["accelerator"], m["test"], m["precision"], m["configuration"])
        by_config.setdefault(key, []).append(len(experiments))
        experiments.append({"id": f"{m['suite']}/{m['model']}/{m['configuration']}", "suite": m["suite"],
                            "model": m["model"], "accelerator": m["accelerator"], "test": m["test"],
                            "precision": m["precision"], "configuration": m["configuration"], "noise": {},
                            "speedup": m["speedup"], "cell": m.get("cell")})
    for s in summaries:
        key = (s["suite"], s["accelerator"], s["test"], s["precision"], s["configuration"])
        members = by_config.get(key, [])
        dashboard.append({
            "suite": s["suite"], "accelerator": s["accelerator"], "test": s["test"], "precision": s["precision"],
            "configuration": s["configuration"], "baseline": s["baseline"], "experiments": members,
            "models": [s["models"]], "passed": [s["passed"]], "checked": [s["checked"]], "speedup_geomean": [s["speedup_geomean"]],
            "speedup_method": [speedup_method(s["speedup_paired"], s["speedup_models"], s["speedup_harness"])],
            "compile_time_mean_s": [s["compile_time_mean_s"]], "memory_ratio_geomean": [s["memory_ratio_geomean"]],
            "speedups_latest": [models[i]["speedup"] for i in members],
        })
    data = {
        "kind": "report",
        "title": f"experiment_runner report: run {run.run_id}",
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "baseline": baseline, "window": 0, "regressions_in_window": 0,
        "runs": [{"id": run.run_id, "t": run.timestamp}], "files": [], "experiments": experiments,
        "series": {}, "changes": [], "records": {}, "dashboard": dashboard,
    }
    return render(data, static_tables(data))
