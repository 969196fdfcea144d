"""Without /usr/bin/chromium the browser tests skip with the install line, except under CI."""

from __future__ import annotations

from pathlib import Path

import pytest

import test_history_page
from test_history_page import INSTALL_CHROMIUM, require_chromium


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
