"""The CUDA-graph decoding step, with CUDA's graph API played on CPU by a recorder of aten ops.

A CUDA graph replays the kernels one capture launched, on the same memory. Any value the host read
during capture (a position turned into a Python int, say) stays baked in, and a host read inside
capture is an error. `RecordedGraph` does the same on CPU: capture records every aten op with its
tensors and fails on a host read; replay reruns the ops and writes each result where the op wrote
at capture. A step that depends on anything but device state then decodes wrong here too.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import translator.decode.step as step
from tests.decode.test_search import _assert_same_searches, _searches

HOST_READS = {"_local_scalar_dense", "item", "is_nonzero", "equal"}


class RecordedGraph:
    def __init__(self) -> None:
        self.ops: list = []

    def replay(self) -> None:
        for func, args, kwargs, out in self.ops:
            for old, new in zip(tree_flatten(out)[0], tree_flatten(func(*args, **kwargs))[0]):
                if isinstance(old, torch.Tensor) and old.data_ptr() != new.data_ptr():
                    old.copy_(new)


class _Recorder(TorchDispatchMode):
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


@pytest.fixture
def recorded_graphs(monkeypatch):
    """CUDA's stream and graph API on CPU, and the searches routed through CudaGraphStep."""
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph: _Recorder(graph))
    steps = []

    def graph_step(model, memory, src_mask, cache):
        if not cache.static:
            return step.decoding_step(model, memory, src_mask, cache)
        steps.append(step.CudaGraphStep(model, memory, src_mask, cache))
        return steps[-1]

    for search in ("beam", "greedy"):
        monkeypatch.setattr(f"translator.decode.{search}.use_cuda_graph", lambda device: True)
        monkeypatch.setattr(f"translator.decode.{search}.decoding_step", graph_step)
    return steps


@pytest.mark.parametrize("changes", [{}, {"positions": "rope", "n_kv_heads": 2}, {"positions": "learned"}])
def test_replayed_steps_decode_what_eager_steps_decode(make_model, src_batch, changes, recorded_graphs):
    model, (src, src_mask) = make_model(**changes), src_batch
    want = _searches(model, src, src_mask, cuda_graphs=False)  # the dense cache, model.decode at every step
    got = _searches(model, src, src_mask)
    assert len(recorded_graphs) == 2 and all(s.graph.ops for s in recorded_graphs)  # both searches replayed
    _assert_same_searches(got, want, 1e-5)


def test_a_host_read_inside_the_step_fails_capture(make_model, src_batch, recorded_graphs, monkeypatch):
    """What CUDA refuses, the recorder refuses: e.g. a position read back as a Python int."""
    import translator.model.cache as cache

    monkeypatch.setattr(cache, "rows_at", lambda table, start, length: table[int(start):int(start) + length])
    monkeypatch.setattr("translator.model.layers.rows_at", cache.rows_at)
    model, (src, src_mask) = make_model(), src_batch
    with pytest.raises(RuntimeError, match="host read during capture"):
        _searches(model, src, src_mask)
