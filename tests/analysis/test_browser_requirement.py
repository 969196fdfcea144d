"""Without /usr/bin/chromium the browser tests skip with the install line, shown in a plain run,
except under CI."""

from __future__ import annotations

from pathlib import Path

import pytest

import test_history_page
from test_history_page import INSTALL_CHROMIUM, require_chromium

pytest_plugins = ("pytester",)
CONFTEST = Path(__file__).parents[1] / "conftest.py"


@pytest.fixture
def no_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_history_page, "CHROMIUM", tmp_path / "chromium")


def test_a_missing_browser_skips_with_the_install_line(no_chromium: None) -> None:
    with pytest.raises(pytest.skip.Exception, match=INSTALL_CHROMIUM):
        require_chromium({})
    with pytest.raises(pytest.skip.Exception):
        require_chromium({"CI": ""})


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_under_ci_a_missing_browser_fails(no_chromium: None, value: str) -> None:
    with pytest.raises(pytest.fail.Exception, match=f"{INSTALL_CHROMIUM}.*CI must run them"):
        require_chromium({"CI": value})


def test_a_present_browser_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "chromium").touch()
    monkeypatch.setattr(test_history_page, "CHROMIUM", tmp_path / "chromium")
    assert require_chromium({"CI": "true"}) is None


@pytest.mark.parametrize("flags", [[], ["-rs"]])
def test_a_plain_run_prints_the_install_line_once(pytester: pytest.Pytester, flags: list[str]) -> None:
    """The README promises the install line in a plain `python -m pytest`, which shows skip reasons
    only under -rs: the suite's conftest prints it in the summary (once with -rs too)."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_page=f"""
        from pathlib import Path

        import test_history_page

        def test_one(monkeypatch):
            monkeypatch.setattr(test_history_page, "CHROMIUM", Path({str(pytester.path / "chromium")!r}))
            test_history_page.require_chromium({{}})

        test_two = test_one
    """)
    pytester.syspathinsert(Path(test_history_page.__file__).parent)
    result = pytester.runpytest_inprocess(*flags)
    result.assert_outcomes(skipped=2)
    (shown,) = [out for out in result.outlines if INSTALL_CHROMIUM in out]
    assert shown.endswith(f"the browser tests need Debian's chromium at {pytester.path / 'chromium'}; install it: "
                          f"{INSTALL_CHROMIUM}")
    assert shown.startswith("SKIPPED [2] " if flags else "2 skipped: ")
