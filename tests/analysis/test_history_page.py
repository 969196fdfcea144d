"""The history page in a real browser: Debian's chromium driven by playwright, the page served over HTTP.

Needs `/usr/bin/chromium` (`$(command -v sudo) apt-get install -y chromium`). Without it these tests skip
with that install line on a laptop, but fail under CI (`CI` set, as `.ci/run` sets it, and
.ci/run installs chromium first): a page nobody rendered in CI is not tested. The screenshot
lands in $EXPERIMENT_RUNNER_ARTIFACTS (default output/ci-artifacts/) for CI to keep.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from benchmarks.nightly_history import HistorySpec, write_history
from experiment_runner.cli import main as cli_main

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
# The install line the skip gives: as root (a container, often without sudo) apt-get alone.
INSTALL_CHROMIUM = ("" if os.geteuid() == 0 else "sudo ") + "apt-get install -y chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
ARTIFACTS = Path(os.environ.get("EXPERIMENT_RUNNER_ARTIFACTS", Path(__file__).parents[2] / "output" / "ci-artifacts"))
SPEC = HistorySpec(nights=20, models=4, seed=5, step_fraction=0.4, failure_fraction=0.13)


@pytest.fixture
def served(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[str, list, dict]]:
    """The page of a generated history with known steps, on http://127.0.0.1:PORT/; the injected truth and JSON."""
    injected = write_history(tmp_path / "nights", SPEC)
    cli_main(["history", str(tmp_path / "nights"), "--format", "json", "--html", str(tmp_path / "page.html")])
    document = json.loads(capsys.readouterr().out)
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.html", injected, document
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def require_chromium(environ: Mapping[str, str]) -> None:
    """Skip without chromium, with the line that installs it; under CI, which installs it, fail."""
    if CHROMIUM.exists():
        return
    message = f"the browser tests need Debian's chromium at {CHROMIUM}; install it: {INSTALL_CHROMIUM}"
    if environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message} (CI is set: CI must run them)")
    pytest.skip(message)


@pytest.fixture
def browser() -> Iterator[Browser]:
    require_chromium(os.environ)
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_page(browser: Browser, url: str, problems: list[str]) -> Page:
    """A new tab on `url`, once its script has run; console errors and warnings, page errors and
    failed requests (a missing file, anything fetched from outside) go to `problems`."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in
            ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(url)
    page.wait_for_selector("body[data-ready=yes]")
    return page


def test_the_history_page_renders_in_chromium(served: tuple[str, list, dict], browser: Browser) -> None:
    url, injected, document = served
    problems: list[str] = []
    page = open_page(browser, url, problems)

    configurations = {(d["test"], d["configuration"]) for d in document["dashboard"]}
    assert page.locator("#dashboard tr.dash-row").count() == len(configurations) == 4
    rows = page.locator("#changes tr.change-row")
    shown = [[rows.nth(i).locator("td").nth(k).inner_text() for k in (1, 2, 3, 6)] for i in range(rows.count())]
    assert shown == [[c["kind"], c["metric"], c["experiment_id"], c["first_bad_run"]] for c in document["changes"]]
    events = page.locator("#events tr.event-row")
    assert [events.nth(i).locator("td").nth(1).inner_text() for i in range(events.count())] == [
        e["run_id"] for e in document["events"]]
    assert page.locator("#window-status").inner_text().startswith(
        f"{document['regressions_in_window']} regression(s)")

    # Every plot renders: scroll each experiment's plots into view (they are drawn lazily).
    plots = page.locator("#experiments .plot")
    assert plots.count() == len(document["experiments"]) * 3
    for i in range(plots.count()):
        plots.nth(i).scroll_into_view_if_needed()
    page.wait_for_function("[...document.querySelectorAll('.plot')].every(p => p.dataset.rendered)",
                           timeout=15_000)
    assert page.locator(".plot[data-rendered=empty]").count() == 0
    assert page.locator(".plot svg path.line").count() == page.locator(".plot").count()
    spans = page.eval_on_selector_all(".plot svg.chart", "svgs => svgs.map(s => Number(s.dataset.span))")
    assert spans and min(spans) >= 0.05, "an axis narrower than 5% of its values makes noise look like a step"

    # A change point is marked where the generator injected a step.
    step = next(i for i in injected if i.kind == "time")
    run_id = document["runs"][step.night]["run_id"]
    box = page.locator(f'#experiments .exp[data-experiment="{step.experiment_id}"]')
    marker = box.locator(f'.plot[data-metric=time] line.cp[data-run="{run_id}"]')
    assert marker.count() == 1
    assert "cp-regression" in marker.get_attribute("class") if step.size > 0 else \
        "cp-improvement" in marker.get_attribute("class")

    # Clicking a model shows its trend: one block per experiment of that model, plots drawn.
    model = step.experiment_id.split("/")[1]
    page.locator(f'#models button.model-link[data-model="{model}"]').first.click()
    trend = page.locator("#trend-section")
    assert trend.is_visible()
    assert page.locator("#trend-title").inner_text() == f"Trend: {model}"
    assert page.locator("#trend .exp").count() == 4
    assert page.locator("#trend .plot[data-rendered=yes] svg path.line").count() == 4 * 3
    assert page.locator(f'#trend line.cp[data-run="{run_id}"]').count() >= 1

    # The records behind a change are one click away.
    page.locator("#changes a.records-link").first.click()
    view = page.locator("#record-view")
    assert view.is_visible() and view.locator("pre.record").count() == 2
    first = json.loads(view.locator("pre.record").nth(1).inner_text())
    assert first["run_id"] == document["changes"][0]["first_bad_run"]
    assert re.fullmatch(r"nights/\d{4}-\d\d-\d\d/results\.jsonl",
                        view.locator("a.file-link").nth(1).get_attribute("href"))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "history_page.png"), full_page=True)
    assert problems == []


def test_the_report_page_renders_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             browser: Browser) -> None:
    """`report --format html` on the golden run: its dashboard rows and per-model cells, no errors."""
    golden = Path(__file__).parents[1] / "golden" / "results.jsonl"
    assert cli_main(["report", str(golden), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert cli_main(["report", str(golden), "--format", "html"]) == 0
    (tmp_path / "report.html").write_text(capsys.readouterr().out)
    problems: list[str] = []
    page = open_page(browser, (tmp_path / "report.html").as_uri(), problems)
    assert page.locator("#dashboard tr.dash-row").count() == len(document["summary"])
    speedups = {m["model"]: m["speedup"] for m in document["models"] if m["configuration"] == "xla=None dynamo=inductor"
                and m["test"] == "eval" and m["accelerator"] == "cpu"}
    cells = page.locator("#models table").first.locator("tr.model-row")
    shown = {cells.nth(i).locator("td").first.inner_text(): cells.nth(i).locator("td").nth(1).inner_text()
             for i in range(cells.count())}
    assert {m: f"{v:.2f}x" for m, v in speedups.items() if v} == {m: v for m, v in shown.items() if v.endswith("x")}
    assert page.locator("#changes-section").is_hidden() and page.locator("#experiments-section").is_hidden()
    assert problems == []
