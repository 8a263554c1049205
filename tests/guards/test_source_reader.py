"""guards/source_reader.py: one generated function reads many sources exactly as ``Source.get``."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from pyjit.guards.source import (AttrSource, ClosureSource, DictEntriesSource, FrameValues, GlobalSource, ItemSource,
                                 LocalSource, ModuleDictSource)
from pyjit.guards.source_reader import compile_reader


def _frame(model: nn.Module) -> FrameValues:
    return FrameValues({"self": model, "x": [10, 20]}, {"G": {"k": 3}}, {"c": "cell"})


def _sources() -> list:
    self_ = LocalSource("self", 0)
    layers = ModuleDictSource(self_, "_modules", "layers")
    first = ModuleDictSource(layers, "_modules", "0")
    return [
        ModuleDictSource(first, "_parameters", "weight"),
        ModuleDictSource(ModuleDictSource(layers, "_modules", "1"), "_parameters", "bias"),
        AttrSource(first, "in_features"),
        ItemSource(LocalSource("x", 1), 1),
        ItemSource(GlobalSource("G"), "k"),  # a global: read through its own get
        ClosureSource("c", 0),
        ItemSource(DictEntriesSource(AttrSource(self_, "_modules"), "keys"), 0),
        ItemSource(LocalSource("x", 1), (0,)[0]),
    ]


def test_reads_what_get_reads() -> None:
    model = nn.Module()
    model.layers = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    frame = _frame(model)
    sources = _sources()
    got = compile_reader(sources)(frame)
    assert len(got) == len(sources)
    for source, value in zip(sources, got):
        assert value is source.get(frame) or value == source.get(frame), source.name()
    # Bases shared by several sources are read once.
    assert compile_reader(sources).__doc__.count("'layers'") == 1


def test_follows_changes_and_raises_like_get() -> None:
    model = nn.Module()
    model.layers = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    read = compile_reader(_sources()[:1])
    w = nn.Parameter(torch.ones(2, 2))
    model.layers[0].weight = w
    assert read(_frame(model))[0] is w
    del model.layers[0].weight
    with pytest.raises(KeyError):
        read(_frame(model))
