"""Open a page in headless Chromium (Debian's ``chromium``) and report what went wrong in it.

:func:`open_page` loads a local file twice: once with ``--dump-dom`` (the DOM after the page's
scripts ran) and Chromium's log on stderr, where every console message of the page appears as
an ``INFO:CONSOLE`` line (uncaught exceptions, ``console.error``...), once with
``--screenshot``. Network access is disabled by flags; the pages under test have no remote
resources anyway.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--disable-default-apps"]


def chromium() -> str | None:
    """The Chromium executable, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclasses.dataclass
class PageResult:
    dom: str
    console: list[str]  # every console message the page produced (errors among them)
    screenshot: str | None


_CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?[:\]].*")


def open_page(path: str, workdir: str, screenshot: str | None = None, timeout: float = 120) -> PageResult:
    exe = chromium()
    assert exe is not None, "chromium is not installed"
    url = "file://" + os.path.abspath(path)
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={os.path.join(workdir, 'chromium-profile')}"]
    proc = subprocess.run([exe, *flags, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000",
                           "--dump-dom", url], capture_output=True, text=True, timeout=timeout)
    console = [m.group(0) for m in _CONSOLE.finditer(proc.stderr)]
    shot = None
    if screenshot is not None:
        subprocess.run([exe, *flags, f"--screenshot={screenshot}", "--window-size=1280,2400", url],
                       capture_output=True, text=True, timeout=timeout)
        shot = screenshot if os.path.exists(screenshot) else None
    return PageResult(proc.stdout, console, shot)
