"""``python -m pyjit``: command-line tools.

- ``python -m pyjit report <trace dir> [-o report.html]``: render the compile trace written
  under ``PYJIT_TRACE`` (:mod:`pyjit.report.events`) as one self-contained HTML page
  (:mod:`pyjit.report.html`).
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyjit", description="pyjit command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="render a PYJIT_TRACE directory as one HTML page")
    rep.add_argument("trace_dir", help="the directory PYJIT_TRACE pointed at")
    rep.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    args = parser.parse_args(argv)
    if args.command == "report":
        if not os.path.isdir(args.trace_dir):
            print(f"pyjit report: {args.trace_dir!r} is not a directory; pass the directory PYJIT_TRACE named",
                  file=sys.stderr)
            return 2
        from .report import html

        path = html.write(args.trace_dir, args.output)
        print(f"pyjit report: wrote {path}")
        return 0
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":
    sys.exit(main())
