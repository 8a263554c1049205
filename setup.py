"""Build pyjit._C (the C core in csrc/) against the running interpreter.

No torch at build time: the extension reads tensor metadata through Python-level getters.
`python setup.py build_ext --inplace` or `pip install -e .` both work on CPython 3.11-3.13.
"""
from __future__ import annotations

import sys
from glob import glob

from setuptools import Extension, find_packages, setup

# -Wall -Wextra: the C core must stay warning-free. NDEBUG is left undefined on purpose:
# header asserts are cheap and catch frame-layout mistakes; hot paths contain no asserts.
extra_compile_args = [] if sys.platform == "win32" else [
    "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers", "-Wno-unused-parameter",
    "-O2",
]

setup(
    name="pyjit",
    version="0.1.0",
    packages=find_packages(include=["pyjit", "pyjit.*"]),
    package_data={"pyjit": ["_C.pyi", "py.typed"], "pyjit.report": ["schema.json"]},
    ext_modules=[
        Extension(
            "pyjit._C",
            sources=sorted(glob("csrc/*.c")),
            depends=sorted(glob("csrc/*.h")),
            extra_compile_args=extra_compile_args,
            # dlopen of the CUDA driver (cuda_launch.c); part of libc on newer glibc.
            libraries=["dl"] if sys.platform.startswith("linux") else [],
        )
    ],
    python_requires=">=3.11,<3.14",
)
