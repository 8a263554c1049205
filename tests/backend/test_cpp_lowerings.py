"""The lowering, fusion and batch-norm/cross-entropy tests re-run through the C++ generator.

The ``device`` fixture here overrides the package's (which selects Triton's interpreter on CPU):
every compiled graph goes through ``codegen/cpp.py`` and the system compiler instead, with the
same assertions (results against eager, kernel and fusion counts). ``cpp_fast_compile`` builds
at -O1 to keep the suite quick; the generated code is the same.
"""
from __future__ import annotations

from typing import Any

import pytest

import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.runtime import cpp_build

from .test_batchnorm_cross_entropy import *  # noqa: F401,F403
from .test_fusion import *  # noqa: F401,F403
from .test_lowerings import *  # noqa: F401,F403
from .test_opinfo_subset import *  # noqa: F401,F403
from .test_workloads import *  # noqa: F401,F403

# These read Triton's loop structure in the generated source (C++ walks every row in rindex loops).
del test_multi_pass_row_reduction_reads_rows_once  # noqa: F821
del test_online_max_sum_exp_reads_long_rows_once  # noqa: F821

pytestmark = pytest.mark.skipif(cpp_build.compiler() is None, reason="no working C++ compiler")


@pytest.fixture(params=["cpu"])
def device(request: Any, tmp_path_factory: Any) -> Any:
    cache = tmp_path_factory.getbasetemp() / "pyjit-cache"
    with cfg.patch(cpu_backend="cpp", cpp_fast_compile=True, raise_on_internal_error=True, cache_dir=str(cache)):
        backend.metrics.reset()
        yield request.param
