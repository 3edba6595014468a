"""Host-launched operations per beam-search step on the path CUDA takes, counted on CPU.

    # ours eager, ours with CUDA graphs, HF generate (the peer comes with `make install`)
    .venv/bin/python -m bench.launches

On a GPU a decoding step of the base model (32 sentences x beam 4, one new token per row) is a few
hundred kernels of microseconds each, so the host launching them bounds the step. The count needs
no GPU: a TorchDispatchMode counts the aten operations each configuration dispatches while
decoding a batch to L = 10 and to L = 30 forced tokens (bench/decode.py's setting and models);
the difference / 20 is one step. Views, no-op dropouts and host reads are not counted (no kernel);
host reads are reported as syncs. Ours runs unconverted, the path CUDA takes (SDPA for the one-token
query, nn.Linear; no model/inference.py conversion); with graphs, CUDA's graph API is played on CPU
(tests/cuda_graph_on_cpu.py) and the replayed operations are reported apart: one graph launch.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

NO_KERNEL = {
    "view",
    "_unsafe_view",
    "reshape",
    "transpose",
    "unsqueeze",
    "squeeze",
    "expand",
    "slice",
    "select",
    "t",
    "detach",
    "alias",
    "permute",
    "flatten",
    "unflatten",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "narrow",
    "as_strided",
    "_reshape_alias",
    "dropout",
    "lift_fresh",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "resolve_conj",
    "resolve_neg",
}
HOST_READS = {"_local_scalar_dense", "item", "is_nonzero"}
CONFIGS = ("ours-eager", "ours-graphs", "hf")


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


def _launches(ops: collections.Counter) -> int:
    return sum(n for name, n in ops.items() if name not in NO_KERNEL | HOST_READS)


def count(config: str, length: int) -> dict:
    """One configuration in this process: operations dispatched to decode one batch to `length`
    tokens."""
    from bench import decode_systems

    graphs = []
    if config == "ours-graphs":
        import translator.decode.beam as beam
        import translator.decode.step as step
        from tests import cuda_graph_on_cpu

        cuda_graph_on_cpu.install(setattr)
        replay = cuda_graph_on_cpu.RecordedGraph.replay

        def uncounted_replay(graph) -> None:  # on a GPU, one launch
            with _disable_current_modes():
                replay(graph)

        cuda_graph_on_cpu.RecordedGraph.replay = uncounted_replay
        beam.use_cuda_graph = lambda device: True  # fixed-shape cache and graph steps on CPU
        beam.decoding_step = lambda *args: graphs.append(step.CudaGraphStep(*args)) or graphs[-1]
    system = "hf" if config == "hf" else "ours"
    # ours unconverted: the path CUDA takes (SDPA, nn.Linear), not the CPU decoding kernels
    cpu = torch.device("cpu")
    if system == "hf":
        model = decode_systems.build_hf(cpu, "float32")
    else:
        model = decode_systems.build_ours(cpu, "float32", cpu_kernels=False)
    batch = {"src": [list(range(5, 25))] * 32, "length": length}
    with _Count() as counter:
        if system == "hf":
            decode_systems.decode_hf(model, batch, 4)
        else:
            decode_systems.decode_ours(model, batch, 4, cuda_graphs=True)
    in_graph = (
        collections.Counter(op.__name__.split(".")[0] for op, *_ in graphs[0].graph.ops)
        if graphs
        else {}
    )
    return {
        "launches": _launches(counter.ops),
        "syncs": sum(counter.ops[name] for name in HOST_READS),
        "graph_kernels": _launches(in_graph),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(count(args.worker[0], int(args.worker[1]))))
        return
    print(
        "| per beam-4 decoding step, 32 sentences | host launches | host syncs "
        "| kernels inside one graph launch |"
    )
    print("|---|---:|---:|---:|")
    for config in args.configs.split(","):
        runs = {}
        for length in (10, 30):  # each in a fresh process: the patches above stay there
            proc = subprocess.run(
                [sys.executable, "-m", "bench.launches", "--worker", config, str(length)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{config} failed:\n{proc.stderr[-3000:]}")
            runs[length] = json.loads(proc.stdout.strip().splitlines()[-1])
        per_step = {key: (runs[30][key] - runs[10][key]) / 20 for key in ("launches", "syncs")}
        graph = runs[30]["graph_kernels"] or "-"
        print(f"| {config} | {per_step['launches']:.0f} | {per_step['syncs']:.0f} | {graph} |")


if __name__ == "__main__":
    main()
