"""The HTML report (pyjit/report/html.py, ``python -m pyjit report``): rendered from a traced run
of a transformers model, it opens in headless Chromium without console errors, lists the graph
break and the recompile at the program's file:line, and is self-contained. Skipped without
Chromium (``apt-get install -y chromium chromium-driver``)."""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from pyjit.report import html as report_html

from .browser import chromium, open_page
from .conftest import ROOT

needs_chromium = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install -y chromium "
                                                               "chromium-driver); the report is not opened in a browser")


def _render(trace_dir: str, out: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "pyjit", "report", trace_dir, "-o", out], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def _table(dom: str, cls: str) -> str:
    m = re.search(rf"<table class=\"{cls}\">(.*?)</table>", dom, re.S)
    assert m is not None, f"no table {cls} in the page"
    return m.group(1)


@needs_chromium
def test_report_opens_without_errors_and_lists_break_and_recompile(traced_run, tmp_path):
    page = _render(traced_run.trace_dir, str(tmp_path / "report.html"))
    result = open_page(page, str(tmp_path), screenshot=str(tmp_path / "report.png"))
    assert result.console == [], result.console
    assert 'data-report-ready="1"' in result.dom  # the page's script ran to its end
    program = traced_run.program
    breaks = _table(result.dom, "graph-breaks")
    assert f"{program}:{traced_run.break_line}" in breaks and ">print<" in breaks
    recompiles = _table(result.dom, "recompiles")
    rows = [r for r in recompiles.split("<tr") if f"{program}:{traced_run.run_line}" in r]
    assert rows and any("L['ids']" in r.replace("&#x27;", "'") for r in rows)
    # each row links to its frame, and the frame is on the page
    for link in re.findall(r'href="#(r0-f\d+)"', breaks + recompiles):
        assert f'id="{link}"' in result.dom
    assert result.screenshot is not None and os.path.getsize(result.screenshot) > 10_000


@needs_chromium
def test_browser_check_detects_a_script_error(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>notDefinedAnywhere();</script></body></html>")
    result = open_page(str(page), str(tmp_path))
    assert any("notDefinedAnywhere" in line for line in result.console), result.console


def test_report_is_self_contained(traced_run, tmp_path):
    text = open(_render(traced_run.trace_dir, str(tmp_path / "r.html")), encoding="utf-8").read()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched from a network
    assert "<style>" in text and "<script>" in text and "Content-Security-Policy" in text


def test_ranks_side_by_side(traced_run, tmp_path):
    (src,) = glob.glob(os.path.join(traced_run.trace_dir, "*.jsonl"))
    for rank in (0, 1):
        with open(src, encoding="utf-8") as f, open(tmp_path / f"pyjit_trace.rank{rank}.1.jsonl", "w") as out:
            for line in f:
                out.write(json.dumps({**json.loads(line), "rank": rank}) + "\n")
    page = report_html.render(str(tmp_path))
    assert "2 rank(s)" in page and page.count("<div class='rank'><h3>rank 1</h3>") == 7  # every section
    assert 'href="#r1-f' in page and "id='r1-f" in page


def test_report_names_unreadable_lines(tmp_path):
    (tmp_path / "pyjit_trace.rank0.1.jsonl").write_text('{"event": "process", "rank": 0}\nnot json\n')
    page = report_html.render(str(tmp_path))
    assert "Problems reading the trace" in page and "pyjit_trace.rank0.1.jsonl:2" in page


def test_cli_refuses_a_missing_directory(tmp_path):
    from pyjit.__main__ import main

    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "x.html")]) == 2
