"""Run metadata: device, driver, Python/torch/Triton/pyjit versions, git commit, host.

Everything here is best effort and never fails a run: a value that cannot be found is recorded
as ``None`` (for example the git commit of a tree copied without ``.git``).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Any

import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pick_device(requested: str) -> torch.device:
    """``auto`` means the first CUDA device when there is one, else the CPU."""
    if requested == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {requested}: this machine has no usable CUDA device; use --device cpu or auto")
    return device


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info() -> dict[str, Any]:
    commit = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"]) if commit else None
    return {"commit": commit, "dirty": (bool(status) if status is not None else None)}


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:
        return None
    return getattr(mod, "__version__", None)


def _pyjit_info() -> dict[str, Any]:
    info: dict[str, Any] = {"version": None, "c_extension": None}
    try:
        import pyjit

        info["version"] = getattr(pyjit, "__version__", None)
    except Exception as exc:
        info["import_error"] = f"{type(exc).__name__}: {exc}"[:200]
        return info
    try:
        import pyjit._C  # noqa: F401

        info["c_extension"] = True
    except Exception as exc:
        info["c_extension"] = False
        info["c_extension_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return info


def device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device.type, "name": None, "driver": None, "cuda": torch.version.cuda,
                            "count": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["name"] = props.name
        info["memory_gib"] = round(props.total_memory / 2**30, 1)
        info["capability"] = f"{props.major}.{props.minor}"
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        info["driver"] = driver.splitlines()[0].strip() if driver else None
    else:
        info["name"] = _cpu_name()
        info["threads"] = torch.get_num_threads()
    return info


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """1/5/15-minute load averages: above the core count, other processes shaped the numbers."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def metadata(device: torch.device) -> dict[str, Any]:
    return {
        "device": device_info(device),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "pyjit": _pyjit_info(),
        "git": git_info(),
        "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "executable": sys.executable,
                 "load_avg_start": load_average()},
    }
