"""The CUDA-graph decoding step, with CUDA's graph API played on CPU
(tests/cuda_graph_on_cpu.py)."""

from __future__ import annotations

import pytest

import translator.decode.step as step
from tests import cuda_graph_on_cpu
from tests.decode.test_search import _assert_same_searches, _searches
from translator.model.inference import for_cpu_decoding


@pytest.fixture
def recorded_graphs(monkeypatch):
    """CUDA's stream and graph API on CPU, and the searches routed through CudaGraphStep."""
    cuda_graph_on_cpu.install(monkeypatch.setattr)
    steps = []

    def graph_step(model, memory, src_mask, cache):
        if not cache.fixed_shapes:
            return step.decoding_step(model, memory, src_mask, cache)
        steps.append(step.CudaGraphStep(model, memory, src_mask, cache))
        return steps[-1]

    for search in ("beam", "greedy"):
        monkeypatch.setattr(f"translator.decode.{search}.use_cuda_graph", lambda device: True)
        monkeypatch.setattr(f"translator.decode.{search}.decoding_step", graph_step)
    return steps


@pytest.mark.parametrize("kernels", ["plain", "cpu"])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"positions": "rope", "n_kv_heads": 2},
        {"positions": "learned"},
        {"positions": "relative", "attention_window": 3},  # a ring cache and a bias, replayed
    ],
)
def test_replayed_steps_decode_what_eager_steps_decode(
    make_model, src_batch, changes, kernels, recorded_graphs
):
    """kernels "plain": the model as a GPU runs it (SDPA, nn.Linear); "cpu": converted for CPU
    decoding."""
    model, (src, src_mask) = make_model(**changes), src_batch
    if kernels == "cpu":
        for_cpu_decoding(model)
    # model.decode at every step, no graph
    want = _searches(model, src, src_mask, cuda_graphs=False)
    got = _searches(model, src, src_mask)
    # both searches replayed
    assert len(recorded_graphs) == 2 and all(s.graph.ops for s in recorded_graphs)
    _assert_same_searches(got, want, 1e-5)


class _HostReadingModel:
    """The model, except that its step reads the cache's position back on the host, as no CUDA graph
    may."""

    def __init__(self, model) -> None:
        self.model, self.cfg = model, model.cfg

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def new_cache(self, *args, **kwargs):
        return self.model.new_cache(*args, **kwargs)

    def decode(self, tokens, memory, src_mask, cache):
        assert int(cache.position) == cache.length
        return self.model.decode(tokens, memory, src_mask, cache)


def test_a_step_that_cannot_be_captured_warns_and_decodes_step_by_step(
    make_model, src_batch, recorded_graphs
):
    """What CUDA refuses (a host read during capture: here a position read back as a Python int),
    the recorder refuses; the search then steps the fixed-shape cache without a graph, says so
    once per search, and finds what the eager searches find."""
    model, (src, src_mask) = make_model(), src_batch
    want = _searches(model, src, src_mask, cuda_graphs=False)
    with pytest.warns(
        RuntimeWarning, match="CUDA graph capture failed \\(host read during capture"
    ) as caught:
        got = _searches(_HostReadingModel(model), src, src_mask)
    assert len(caught) == 2 and all(s.eager and s.graph is None for s in recorded_graphs)
    _assert_same_searches(got, want, 1e-5)
