"""Code for the atomic kernel of a scatter-add (``ir.ScatterAdd``; lowering/scatter.py).

The kernel iterates over the *source* elements and adds each value into its target element
of a buffer that an earlier kernel filled (zeros, or a copy of ``index_put``'s ``self``).
Several sources may share a target, so the add must not lose updates:
- Triton: ``tl.atomic_add`` (relaxed: the only ordering needed is that every add lands
  before the kernel ends, which the launch boundary gives). The summation order therefore
  depends on scheduling, as in eager's CUDA ``index_put_``/embedding backward.
- C++: a serial read-modify-write loop (no ``omp simd``/``parallel``, which would race or
  vectorize the read-modify-write across lanes that hit one element). fp16/bf16 elements
  are read as fp32 and rounded after each add, as eager's CPU kernel does.
``valid`` masks sources that must not write (an index outside the dimension, whose clamped
address is only there to be in bounds; embedding's padding index).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import sympy
import torch

from .common import triton_dtype

if TYPE_CHECKING:
    from .cpp import CppKernel
    from .triton import CSEVar, TritonKernel


def triton_atomic_add(kernel: "TritonKernel", name: str, index: sympy.Expr, value: "CSEVar",
                      valid: "CSEVar | None") -> None:
    ptr = kernel.outputs.setdefault(name, f"out_ptr{len(kernel.outputs)}")
    dtype = kernel.dtypes[name]
    val = str(value)
    if value.dtype != dtype:
        val = f"{val}.to({triton_dtype(dtype)})"
    pointer, mask = kernel._pointer(ptr, index, store=True)
    if valid is not None:
        mask = f"({mask}) & {valid}" if mask else str(valid)
    mask_text = f", {mask}" if mask else ""
    kernel._section(kernel.section).writeline(f"tl.atomic_add({pointer}, {val}{mask_text}, sem='relaxed')")


def cpp_atomic_add(kernel: "CppKernel", name: str, index: sympy.Expr, value: "CSEVar",
                   valid: "CSEVar | None") -> None:
    from .cpp import cpp_type
    ptr = kernel.outputs.setdefault(name, f"out_ptr{len(kernel.outputs)}")
    dtype = kernel.dtypes[name]
    target = f"{ptr}[{kernel._index_str(index)}]"
    if dtype == torch.bfloat16:
        line = f"{target} = pyjit_f32_to_bf16(pyjit_bf16_to_f32({target}) + static_cast<float>({value}));"
    elif dtype == torch.float16:
        line = f"{target} = pyjit_f32_to_f16(pyjit_f16_to_f32({target}) + static_cast<float>({value}));"
    else:
        line = f"{target} = static_cast<{cpp_type(dtype)}>({target} + static_cast<{cpp_type(dtype)}>({value}));"
    if valid is not None:
        line = f"if ({valid}) {{ {line} }}"
    kernel._section(kernel.section).writeline(line)


__all__ = ["triton_atomic_add", "cpp_atomic_add"]
