"""`gencache report` and what `gencache score` prints, as a user meets them: the page opened in a real headless
Chromium (Debian's `chromium`, which .ci/run installs when absent) loads with no console error and no network
request, shows one chart per data config and the examples table. A teacher cut at max_new_tokens is flagged at the
top of the page and of `score`'s output, the worst sign first; count axes have whole-number ticks and no number
wraps; a run without gold says so and draws no score chart; with scored and unscored answers mixed the examples
show both. Without matplotlib the page still has its tables and says what the charts need; the page holds no URL
at all."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gencache.cli.app import run as cli_run
from support.browser import chromium, evaluate, find_chromium, load_page, screenshot
from support.config_factory import config_dict, musique

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

    from gencache.data import prompts, samples
    from gencache.run import score as scoring

    joined: list[str] = []
    real = prompts.prompt_text

    def counted(parts: prompts.Prompt) -> str:
        joined.append(real(parts))
        return joined[-1]

    monkeypatch.setattr(samples, "prompt_text", counted)
    monkeypatch.setattr(scoring, "EXAMPLES", 1)
    result = scoring.write_report(demo_run["artifact"], tmp_path / "report.html")
    text = result.out.read_text(encoding="utf-8")
    assert result.data_configs == 4 and text.count('<table class="examples">') == 4
    assert len(joined) == 4  # one example per data config; the demo has 12 samples
    assert all(html.escape(prompt[-100:]) in text for prompt in joined)  # the end of each prompt shown


#: What the page shows a user, read in the browser: the first lines under the title, the verdict's levels, the tick
#: labels of each figure's count axes, the numbers that take more than one line, the score charts, the examples.
SHOWN = """JSON.stringify({
 first: [...document.querySelectorAll('h1 ~ *')].slice(0, 1).map(e => e.innerText),
 levels: [...document.querySelectorAll('ul.verdict li')].map(li => li.className),
 ticks: [...document.querySelectorAll('figure.chart svg')].map(svg =>
   [...svg.querySelectorAll('g[id^="axes_"]')].map(axes =>
     [...axes.querySelectorAll('g[id^="matplotlib.axis"]')].map(axis =>
       [...axis.querySelectorAll('g[id^="xtick_"] text, g[id^="ytick_"] text')].map(t => t.textContent.trim())))),
 wrapped: [...document.querySelectorAll('td.num')].filter(td => {
   const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1;
 }).map(td => td.innerText),
 axes: [...document.querySelectorAll('figure.chart svg')].map(svg => svg.querySelectorAll('g[id^="axes_"]').length),
 noGold: document.querySelectorAll('p.no-gold').length,
 examples: [...document.querySelectorAll('table.examples tr')].slice(1).map(tr => tr.children[3].innerText),
})"""


def shown(page: Path, tmp_path: Path) -> dict[str, Any]:
    """What a real browser shows of ``page``, at a laptop's width; no console error, no request."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium: apt-get install chromium)")
    with chromium(binary, tmp_path / "profile") as browser:
        session, load = load_page(browser, page.as_uri())
        assert [(level, text) for level, text in load.console if level in ("error", "warning")] == []
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 900, "height": 800, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        found: dict[str, Any] = json.loads(evaluate(browser, session, SHOWN))
    return found


@pytest.fixture(scope="module")
def cut_run(demo_run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The newcomer's bad teacher: the demo run again with max_new_tokens 3, so every answer is cut there."""
    out = tmp_path_factory.mktemp("cut") / "run"
    argv = [str(demo_run["config_path"]), "--set", "model.generation_kwargs.max_new_tokens=3", "--output-dir", str(out)]
    assert cli_run(["generate", *argv]) == 0
    return out


def table_run(directory: Path, teacher: str, golds: list[str] | None) -> Path:
    """A table run of one question per gold (``None``: a table without an answer column: no gold at all)."""
    directory.mkdir()
    rows = [{"question": f"Which city is number {i}?", "gold": gold} for i, gold in enumerate(golds or ["x"] * 6)]
    source = directory / "rows.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    answer = {"answer": None if golds is None else "gold"}
    table = musique(dataset_name="table", num_samples=len(rows), seed=0, source=str(source), data_kwargs=answer)
    config = directory / "config.json"
    config.write_text(json.dumps(config_dict(directory, teacher, data_configs=[table])), encoding="utf-8")
    assert cli_run(["generate", str(config), "--output-dir", str(directory / "run")]) == 0
    return directory / "run"


def test_a_teacher_cut_at_max_new_tokens_is_flagged_first(
    cut_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli_run(["score", str(cut_run)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "bad: 12 of 12 answers (100%) were cut at max_new_tokens (3)."
    assert printed[1].startswith("bad: Against the gold: contains 0.00 (biography), f1 0.00 (hotpot_qa)")
    out = tmp_path / "report.html"
    assert cli_run(["report", str(cut_run), "--out", str(out)]) == 0
    page = shown(out, tmp_path)
    assert page["first"] == [
        "12 of 12 answers (100%) were cut at max_new_tokens (3).\n"
        "Against the gold: contains 0.00 (biography), f1 0.00 (hotpot_qa), f1 0.00 (musique), contains 0.00 (niah).\n"
        "0 of 12 answers (0%) are empty as scored.\n"
        "0 of 12 answers (0%) have no gold reference."
    ]
    assert page["levels"] == ["bad", "bad", "good", "good"] and page["wrapped"] == []
    assert len(page["ticks"]) == 4
    for lengths, joint, scores in page["ticks"]:  # every axis of counts, tokens or characters: whole numbers
        for labels in (*lengths, *joint, scores[1]):
            assert labels and all(re.fullmatch(r"[−-]?\d+", label) for label in labels), labels


def test_the_score_table_never_wraps_a_number(cut_run: Path) -> None:
    import io

    from rich.console import Console

    import gencache
    from gencache.cli.render import render_scores

    report = gencache.score(cut_run)
    for width in (64, 80, 200):  # the terminal widths users have
        printed = io.StringIO()
        render_scores(report, Console(file=printed, width=width))
        cells = re.findall(r"\d+\.\d*|…", printed.getvalue().split("scores of")[1])
        assert cells and all(re.fullmatch(r"\d\.\d{3}", cell) for cell in cells), (width, cells)


def test_without_gold_score_and_report_say_so(
    demo_run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = table_run(tmp_path / "no-gold", demo_run["teacher"], None)
    capsys.readouterr()
    assert cli_run(["score", str(run)]) == 0
    printed = capsys.readouterr().out
    assert "warn: No answer has a gold reference: nothing is scored against the gold." in printed.splitlines()[:3]
    assert "–" not in printed and "exact_match" not in printed and "contains" not in printed  # no column of dashes
    out = tmp_path / "report.html"
    assert cli_run(["report", str(run), "--out", str(out)]) == 0
    page = shown(out, tmp_path)
    assert "No answer has a gold reference: nothing is scored against the gold." in page["first"][0]
    assert page["axes"] == [2] and page["noGold"] == 1  # answer lengths and prompts: no score chart
    assert page["examples"] == ["no gold"] * 6


def test_examples_show_unscored_answers_beside_the_worst_scored(
    demo_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gencache.run import score as scoring

    run = table_run(tmp_path / "mixed", demo_run["teacher"], ["Paris", "Rome", "", "Lyon", "Oslo", "Bern", "", "Nice"])
    monkeypatch.setattr(scoring, "EXAMPLES", 4)
    out = tmp_path / "report.html"
    scoring.write_report(run, out)
    page = shown(out, tmp_path)
    assert page["axes"] == [3] and page["noGold"] == 0
    assert len(page["examples"]) == 4 and page["examples"][-1] == "no gold" and "no gold" not in page["examples"][:3]
    assert "2 of 8 answers (25%) have no gold reference." in page["first"][0]
