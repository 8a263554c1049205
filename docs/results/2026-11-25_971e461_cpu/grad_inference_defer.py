"""Grad-enabled inference against no_grad, pyjit with and without deferred saving.

    PYTHONPATH=. python docs/results/2026-11-25_971e461_cpu/grad_inference_defer.py

transformers' GPT2Block (n_embd 256, 4 heads, eager attention), input [4, 128, 256], one thread,
median of 40 calls after 5 warm-up calls; eager in the same process. With
``aot_defer_saving=False`` the forward of a grad-enabled call writes the activations a backward
would need; with it (the default) it runs the no_grad kernels and saves only its inputs.
"""
import time

import torch
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

import pyjit
from pyjit import config as cfg

torch.manual_seed(0)
torch.set_num_threads(1)
block = GPT2Block(GPT2Config(n_embd=256, n_head=4, n_layer=1, attn_implementation="eager")).eval()
x = torch.randn(4, 128, 256)


def f(t: torch.Tensor) -> torch.Tensor:
    return block(t)[0]


def median_us(fn, n: int = 40) -> float:
    for _ in range(5):
        fn(x)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2] * 1e6


rows = {}
for defer in (False, True):
    pyjit.reset()
    with cfg.patch(aot_defer_saving=defer):
        jitted = pyjit.jit(f)
        with torch.no_grad():
            no_grad = median_us(jitted)
        rows[f"pyjit, aot_defer_saving={defer}"] = (no_grad, median_us(jitted))
with torch.no_grad():
    eager_no_grad = median_us(f)
rows["eager"] = (eager_no_grad, median_us(f))
for name, (ng, g) in rows.items():
    print(f"{name:34s} no_grad {ng:8.0f} us   grad enabled {g:8.0f} us   ratio {g / ng:.2f}")
