"""Seeing compilation: the structured compile trace (``events``), its HTML report (``html``,
``python -m pyjit report``), the progress line of long compiles (``progress``) and pyjit's
ranges in ``torch.profiler`` traces (``profiler``). See docs/observability.md."""
