"""CUDA's stream and graph API played on CPU, for tests (and bench/launches.py) on machines without
a GPU.

A CUDA graph replays the kernels one capture launched, on the same memory. Any value the host read
during capture (a position turned into a Python int, say) stays baked in, and a host read inside
capture is an error. `RecordedGraph` does the same on CPU: capture records every aten op with its
tensors and fails on a host read; replay reruns the ops and writes each result where the op wrote
at capture. A step that depends on anything but device state then decodes wrong here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HOST_READS = {"_local_scalar_dense", "item", "is_nonzero", "equal"}


class RecordedGraph:
    def __init__(self) -> None:
        self.ops: list = []  # (op, args, kwargs, output) in capture order

    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            for old, new in zip(tree_flatten(out)[0], tree_flatten(func(*args, **kwargs))[0]):
                if isinstance(old, torch.Tensor) and old.data_ptr() != new.data_ptr():
                    old.copy_(new)


class _Capture(TorchDispatchMode):
    def __init__(self, graph: RecordedGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in HOST_READS:
            raise RuntimeError(f"host read during capture: {func}")
        out = func(*args, **(kwargs or {}))
        self.graph.ops.append((func, args, kwargs or {}, out))
        return out


class _Stream:
    def wait_stream(self, other) -> None:
        pass


def install(setattr: Callable[[object, str, object], None]) -> None:
    """Replace torch.cuda's stream and graph API with the CPU stand-ins, through `setattr` (e.g.
    monkeypatch.setattr)."""
    setattr(torch.cuda, "Stream", _Stream)
    setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    setattr(torch.cuda, "graph", _Capture)
