"""A search's decoding step: model.decode of one new token per row, replayed as a CUDA graph on
GPUs.

On a GPU a beam-search step of a base-size model is a few hundred small kernels (layer norms,
projections, attention over a few hundred rows), each done in microseconds: the host launching
them one by one is what bounds the step (counted by `make bench-launches`). A CUDA graph records
the launches of one step once and replays them with one call. It needs every step to run the
same kernels on the same addresses, hence a KV cache with `fixed_shapes` (all T_max slots read,
the position in a device tensor), and no host reads inside the step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from translator.model.cache import KVCache
from translator.model.transformer import Transformer


def use_cuda_graph(device: torch.device) -> bool:
    """Graphs on CUDA, and not under autocast (its cache of cast weights must not outlive a
    capture)."""
    return device.type == "cuda" and not torch.is_autocast_enabled("cuda")


def decoding_step(
    model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, cache: KVCache
) -> Callable[[torch.Tensor], torch.Tensor]:
    """tokens (N, 1) at the cache's next position -> logits (N, 1, V); the caller advances it.

    With a fixed-shape cache on CUDA the step is a CUDA graph: its logits tensor is overwritten by
    the next call, so a caller reads it before calling again.
    """
    if cache.fixed_shapes and memory.is_cuda:
        return CudaGraphStep(model, memory, src_mask, cache)
    return lambda tokens: model.decode(tokens, memory, src_mask, cache)


class CudaGraphStep:
    """model.decode(tokens, memory, src_mask, cache) for one token per row, captured on the first
    call."""

    def __init__(
        self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, cache: KVCache
    ) -> None:
        # the step, eagerly
        self.decode = lambda tokens: model.decode(tokens, memory, src_mask, cache)
        # (N, 1): the graph's input, copied into at each step
        self.tokens: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # (N, 1, V): the graph's output
        self.eager = False  # capture failed: step without a graph

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.graph is None and not self.eager:
            try:
                self._capture(tokens)
            except RuntimeError as error:  # an operation this GPU or PyTorch cannot capture
                reason = (
                    str(error).strip().splitlines()[0]
                    if str(error).strip()
                    else type(error).__name__
                )
                warnings.warn(
                    f"CUDA graph capture failed ({reason}); this search decodes step by step "
                    "(--no-cuda-graphs skips the attempt)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.eager = True
        if self.eager:  # the fixed-shape cache, stepped without a graph
            return self.decode(tokens)
        self.tokens.copy_(tokens)
        self.graph.replay()
        return self.logits

    def _capture(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens.clone()
        with torch.cuda.device(tokens.device):  # capture runs on the current device's streams
            # One eager run first, on a side stream as capture requires: it projects the
            # cross-attention K/V (kept outside the graph) and lets kernels pick their algorithms.
            # It writes this step's K/V slot, which the first replay rewrites with the same values.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.decode(self.tokens)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = self.decode(self.tokens)
        self.graph, self.logits = graph, logits
