"""The frontend's end-to-end corpus: functions of the kind found in real PyTorch code, each with
an input factory and what ``pyjit.jit`` must produce for it.

The cases live in ``corpus_tensors`` (arithmetic, containers, indexing, shapes, dtypes and
layouts), ``corpus_control`` (loops, helpers, closures, methods, grad mode, checks, snippets,
signatures), ``corpus_python`` (language features, more tensor methods, autocast) and
``corpus_modules`` (``nn.Module`` instances) and ``corpus_models`` (small complete models). This module gathers them into :data:`CASES`.

What every case expects
-----------------------
- exactly ``case.graphs`` graphs (1 for every case: all of them are fully capturable) handed
  to the backend over two calls with different random inputs of the same shapes (so the
  second call must hit the cache);
- ``case.calls`` counted graph calls in that graph, counted as follows:

  * every FX node with ``op`` in ``call_function``/``call_method``/``call_module`` counts 1
    (``placeholder``, ``get_attr``, ``output`` never count);
  * modules are inlined, so a library layer counts as the functional call(s) its ``forward``
    makes (``nn.Linear`` -> 1 ``F.linear``; ``nn.Identity`` -> 0);
  * each element taken out of a multi-output op (``chunk``, ``split``, ``unbind``, ``max(dim)``,
    ``topk``) is one ``operator.getitem`` node; the corpus uses every element it unpacks, so the
    count does not depend on dead-code elimination (there is no dead tensor code in the corpus);
  * Python-level work on constants (shapes, dtypes, ints, strings, containers) is not a call;
    ``x * 0``/``x + 0`` with a Python constant still is (the frontend must not fold tensor ops);
  * nodes that only switch grad mode/autocast (``torch._C._set_grad_enabled`` ...) are not
    counted; correctness of no_grad regions is checked through ``requires_grad`` of outputs.

- results equal to eager (bit-identical with the counting backend, which runs the graph as
  is), including container types, dict key order, dtype, shape, ``requires_grad``, in-place
  effects on inputs, and identity for inputs returned unchanged.

Where torch.compile (the peer, checked by ``check_corpus_with_dynamo.py``) counts differently
for a legitimate reason, the case carries ``dynamo_calls`` and a ``note``. With torch 2.13 no
case needs one: Dynamo (``fullgraph=True``, counting backend) produces exactly one graph with
exactly ``calls`` counted calls, and eager's results, for every case.
"""
from __future__ import annotations

# Import order is registration order: tensors, control flow, modules.
from . import corpus_tensors, corpus_control, corpus_python, corpus_modules, corpus_models  # noqa: F401,I001  (registers cases)
from .corpus_spec import CASES, Case

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}

__all__ = ["CASES", "CASES_BY_NAME", "Case"]
