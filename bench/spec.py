"""The shape of a benchmark workload (:class:`Workload`, :class:`Built`), shared by
:mod:`bench.workloads` (kernels, overhead) and :mod:`bench.models` (end-to-end models)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

InputFactory = Callable[[torch.Generator], tuple[Any, ...]]


@dataclasses.dataclass
class Built:
    """A ready workload: the callable, how to make inputs, and a human-readable shape."""

    fn: Callable[..., Any]
    make_inputs: InputFactory
    shape: str
    flops: float | None = None  # per call, for compute-bound workloads
    # What is called with the inputs, given the (compiled or eager) ``fn``; None = ``fn`` itself.
    # Training steps use it: the backend compiles the model, the step runs forward + backward.
    call: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None

    def callable_for(self, compiled: Callable[..., Any]) -> Callable[..., Any]:
        return compiled if self.call is None else self.call(compiled)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    suite: str  # "kernels", "models" or "overhead"
    build: Callable[[torch.device, str], Built]
    description: str
    memory_bound: bool = False  # report achieved bandwidth against the measured copy bandwidth
    atol: float = 1e-4
    rtol: float = 1e-4
    quick: bool = False  # part of the quick suite
    inference: bool = True  # run under torch.no_grad()


def randn(gen: torch.Generator, device: torch.device, *shape: int) -> torch.Tensor:
    # Generated on the CPU generator then moved, so inputs are identical on every device.
    return torch.randn(*shape, generator=gen).to(device)


def module_built(module: "torch.nn.Module", device: torch.device, make: InputFactory, shape: str) -> Built:
    """A module workload: moved to the device and put in eval mode (inference benchmarks)."""
    module = module.to(device).eval()
    return Built(module, make, shape)
