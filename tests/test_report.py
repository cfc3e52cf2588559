"""`gencache report`: one self-contained HTML page, opened in a real headless Chromium (Debian's `chromium`, which
.ci/run installs when absent): it loads with no console error and no network request, shows one chart per data
config and the examples table, and a screenshot is taken. Without matplotlib the page still has its tables and
says what the charts need; the page holds no URL at all."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from support.browser import chromium, evaluate, find_chromium, load_page, screenshot

URL = re.compile(r"\b(?:https?|wss?|ftp|file)://", re.IGNORECASE)


@pytest.fixture(scope="module")
def page(demo_run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo run's report with an audit of two of its keys."""
    work = tmp_path_factory.mktemp("report")
    audit = work / "audit.json"
    assert cli_run(["audit", str(demo_run["artifact"]), "--samples", "2", "--report", str(audit)]) in (0, 1)
    out = work / "report.html"
    assert cli_run(["report", str(demo_run["artifact"]), "--out", str(out), "--audit", str(audit)]) == 0
    return {"out": out, "audit": json.loads(audit.read_text()), "work": work}


def test_the_page_is_self_contained(page: dict[str, Any], demo_run: dict[str, Any]) -> None:
    text = page["out"].read_text(encoding="utf-8")
    assert URL.search(text) is None and "<script" not in text and "<link" not in text
    assert text.count('<figure class="chart"') == 4 and text.count('<table class="examples"') == 4
    assert "max_new_tokens" in text and "Determinism" in text and "Audit" in text
    assert f"{page['audit']['audited']} audited keys" in text
    assert len(text.encode()) < 400_000


def test_the_page_loads_in_a_real_browser(page: dict[str, Any], tmp_path: Path) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium: apt-get install chromium)")
    url = page["out"].as_uri()
    with chromium(binary, tmp_path / "profile") as browser:
        session, load = load_page(browser, url)
        errors = [(level, text) for level, text in load.console if level in ("error", "warning", "assert")]
        assert errors == [] and load.exceptions == []
        assert [request for request in load.requests if request != url and not request.startswith("data:")] == []
        found = evaluate(
            browser,
            session,
            "JSON.stringify({sections: document.querySelectorAll('section.data-config').length,"
            " charts: [...document.querySelectorAll('section.data-config')].map("
            "  s => s.querySelectorAll('figure.chart svg').length),"
            " drawn: [...document.querySelectorAll('figure.chart svg')].map(s => s.getBoundingClientRect().width),"
            " examples: document.querySelectorAll('table.examples tr').length,"
            " images: [...document.images].filter(i => !i.complete).length})",
        )
        shown = json.loads(found)
        assert shown["sections"] == 4 and shown["charts"] == [1, 1, 1, 1]
        assert all(width > 300 for width in shown["drawn"]) and shown["examples"] > 4 and shown["images"] == 0
        picture = screenshot(browser, session, tmp_path / "report.png")
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and len(picture) > 20_000


def test_without_matplotlib_the_page_has_its_tables(
    demo_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails, as where it is missing
    out = tmp_path / "plain.html"
    capsys.readouterr()
    assert cli_run(["report", str(demo_run["artifact"]), "--out", str(out)]) == 0
    assert "gencache[report]" in capsys.readouterr().err
    text = out.read_text(encoding="utf-8")
    assert "<svg" not in text and 'id="charts-missing"' in text and "gencache[report]" in text
    assert text.count('<table class="examples"') == 4 and URL.search(text) is None


def test_a_report_never_writes_over_a_file_and_checks_the_audit(
    demo_run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    not_audit = tmp_path / "audit.json"
    not_audit.write_text('{"some": "thing"}')
    capsys.readouterr()
    assert cli_run(["report", str(demo_run["artifact"]), "--out", str(out), "--audit", str(not_audit)]) == 2
    assert "not a report of gencache audit --report" in capsys.readouterr().err and not out.exists()


def test_the_report_joins_only_the_prompts_it_shows(
    demo_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompt lengths (the chart's) are counted from the parts; a prompt is joined into one string only for an
    example row, so a run of long prompts is never held joined in memory."""
    import html

    from gencache.data import prompts
    from gencache.run import quality_report

    joined: list[str] = []
    real = prompts.prompt_text

    def counted(parts: prompts.Prompt) -> str:
        joined.append(real(parts))
        return joined[-1]

    monkeypatch.setattr(prompts, "prompt_text", counted)
    monkeypatch.setattr(quality_report, "EXAMPLES", 1)
    result = quality_report.write_report(demo_run["artifact"], tmp_path / "report.html")
    text = result.out.read_text(encoding="utf-8")
    assert result.data_configs == 4 and text.count('<table class="examples">') == 4
    assert len(joined) == 4  # one example per data config; the demo has 12 samples
    assert all(html.escape(quality_report._excerpt(prompt, tail=True)) in text for prompt in joined)
