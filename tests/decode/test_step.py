"""The CUDA-graph decoding step, with CUDA's graph API played on CPU (tests/cuda_graph_on_cpu.py)."""

from __future__ import annotations

import pytest
import torch

import translator.decode.step as step
from tests import cuda_graph_on_cpu
from tests.decode.test_search import _assert_same_searches, _searches
from tests.model.test_cache import _forbidden


@pytest.fixture
def recorded_graphs(monkeypatch):
    """CUDA's stream and graph API on CPU, and the searches routed through CudaGraphStep."""
    cuda_graph_on_cpu.install(monkeypatch.setattr)
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


@pytest.mark.parametrize("path", ["cpu", "cuda"])
@pytest.mark.parametrize("changes", [{}, {"positions": "rope", "n_kv_heads": 2}, {"positions": "learned"}])
def test_replayed_steps_decode_what_eager_steps_decode(make_model, src_batch, changes, path, recorded_graphs,
                                                       monkeypatch):
    """path "cuda": the layers take the branches they take on a GPU (SDPA for the one-token query,
    F.linear), selected on CPU by reporting autograd as on; "cpu": the CPU search path."""
    if path == "cuda":
        monkeypatch.setattr(torch, "is_grad_enabled", lambda: True)
        monkeypatch.setattr("translator.model.attention.attention_weights", _forbidden)
    model, (src, src_mask) = make_model(**changes), src_batch
    want = _searches(model, src, src_mask, cuda_graphs=False)  # the dense cache, model.decode at every step
    got = _searches(model, src, src_mask)
    assert len(recorded_graphs) == 2 and all(s.graph.ops for s in recorded_graphs)  # both searches replayed
    _assert_same_searches(got, want, 1e-5)


def test_a_step_that_cannot_be_captured_warns_and_decodes_step_by_step(make_model, src_batch, recorded_graphs,
                                                                       monkeypatch):
    """What CUDA refuses (a host read during capture: here a position read back as a Python int),
    the recorder refuses; the search then steps the static cache without a graph, says so once per
    search, and finds what the eager searches find."""
    import translator.model.cache as cache

    model, (src, src_mask) = make_model(), src_batch
    want = _searches(model, src, src_mask, cuda_graphs=False)
    monkeypatch.setattr(cache, "rows_at", lambda table, start, length: table[int(start):int(start) + length])
    monkeypatch.setattr("translator.model.layers.rows_at", cache.rows_at)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed \\(host read during capture") as caught:
        got = _searches(model, src, src_mask)
    assert len(caught) == 2 and all(s.eager and s.graph is None for s in recorded_graphs)
    _assert_same_searches(got, want, 1e-5)
