"""Where a training step's time goes, ours and Hugging Face MarianMTModel's, by part of the model.

    .venv/bin/python -m bench.train_profile --config multi30k --steps 2 [--precision bf16]

torch.profiler records the updates on one thread. Forward hooks on the modules (and wrappers
around the loss and the gradient norm) open a `part:` region around each part; the SDPA call and
dropout are split out by operator. A backward operator is charged to the part whose forward
operator created its autograd node (the profiler gives both the same sequence number), so each
part gets a forward and a backward column. Each operator's self time is counted once. Times are
per update, in ms, under the profiler (which adds a little to every operator).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from bench import train_peer
from translator.device import resolve_device
from translator.train import loop
from translator.train.batches import TrainBatches
from translator.train.distributed import Dist
from translator.train.dropout import BitsDropout
from translator.train.state import TrainState

ENGINE = "autograd::engine::evaluate_function: "
DROPOUT = {"aten::dropout", "aten::feature_dropout", "aten::native_dropout"}
ROWS = [  # printing order
    "collation",
    "embedding (tokens, scale, positions)",
    "encoder self-attention: projections",
    "encoder self-attention: SDPA kernel",
    "decoder self-attention: projections",
    "decoder self-attention: SDPA kernel",
    "cross-attention: projections",
    "cross-attention: SDPA kernel",
    "FFN",
    "LayerNorm + residual",
    "dropout",
    "output projection",
    "loss",
    "model glue (masks, logits bias, ...)",
    "backward: gradient accumulation",
    "gradient norm + clip",
    "optimizer (AdamW)",
    "zero_grad",
    "other",
]


def our_parts(model: torch.nn.Module) -> dict[torch.nn.Module, str]:
    """Module -> part for our Transformer (inner modules win over the blocks around them)."""
    parts = {model: ROWS[13], model.src_embed: ROWS[1], model.tgt_embed: ROWS[1]}
    parts |= {m: ROWS[10] for m in model.modules() if isinstance(m, (nn.Dropout, BitsDropout))}
    parts[model.out_proj] = ROWS[11]
    parts[model.encoder_norm] = parts[model.decoder_norm] = ROWS[9]
    for layer in model.encoder:
        parts |= {layer: ROWS[9], layer.self_attn: ROWS[2], layer.ff: ROWS[8]}
    for layer in model.decoder:
        parts |= {layer: ROWS[9], layer.self_attn: ROWS[4], layer.cross_attn: ROWS[6]}
        parts[layer.ff] = ROWS[8]
    return parts


def hf_parts(model: torch.nn.Module) -> dict[torch.nn.Module, str]:
    """Module -> part for MarianMTModel; its stacks' own code (scale, positions, masks) is
    embedding."""
    m = model.model
    parts = {model: ROWS[13], model.lm_head: ROWS[11], m.encoder: ROWS[1], m.decoder: ROWS[1]}
    for layer in m.encoder.layers:
        parts |= {layer: ROWS[9], layer.self_attn: ROWS[2]}
        parts |= {layer.fc1: ROWS[8], layer.fc2: ROWS[8], layer.activation_fn: ROWS[8]}
    for layer in m.decoder.layers:
        parts |= {layer: ROWS[9], layer.self_attn: ROWS[4], layer.encoder_attn: ROWS[6]}
        parts |= {layer.fc1: ROWS[8], layer.fc2: ROWS[8], layer.activation_fn: ROWS[8]}
    return parts


@contextlib.contextmanager
def regions(parts: dict[torch.nn.Module, str]):
    """Open `part:NAME` around each module's forward (a shared module object gets one region)."""
    handles, open_ = [], collections.defaultdict(list)
    for module, name in parts.items():

        def pre(mod, args, name=name):
            open_[id(mod)].append(record_function("part:" + name).__enter__())

        def post(mod, args, out):
            open_[id(mod)].pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def wrapped(function, name: str):
    def inner(*args, **kwargs):
        with record_function("part:" + name):
            return function(*args, **kwargs)

    return inner


@contextlib.contextmanager
def function_regions():
    """The loss and the gradient norm / clip as parts, for both systems (patched where called)."""
    saved = (loop.token_loss, loop.chunked_token_loss, train_peer.token_loss)
    saved_norm = (torch.nn.utils.get_total_norm, torch.nn.utils.clip_grads_with_norm_)
    loop.token_loss = wrapped(saved[0], ROWS[12])
    loop.chunked_token_loss = wrapped(saved[1], ROWS[12])
    train_peer.token_loss = wrapped(saved[2], ROWS[12])
    torch.nn.utils.get_total_norm = wrapped(saved_norm[0], ROWS[15])
    torch.nn.utils.clip_grads_with_norm_ = wrapped(saved_norm[1], ROWS[15])
    try:
        yield
    finally:
        loop.token_loss, loop.chunked_token_loss, train_peer.token_loss = saved
        torch.nn.utils.get_total_norm, torch.nn.utils.clip_grads_with_norm_ = saved_norm


def forward_part(event) -> str | None:
    """The part of an operator outside the backward pass, from its enclosing regions."""
    kernel = False
    while event is not None:
        name = event.name
        if name in DROPOUT:
            return ROWS[10]
        if name == "aten::scaled_dot_product_attention":
            kernel = True
        if name.startswith("part:"):
            part = name[5:]
            return part.replace("projections", "SDPA kernel") if kernel else part
        if name.startswith("Optimizer.step"):
            return ROWS[16]
        if name.startswith("Optimizer.zero_grad"):
            return ROWS[17]
        event = event.cpu_parent
    return None


def engine_node(event):
    while event is not None and not event.name.startswith(ENGINE):
        event = event.cpu_parent
    return event


def breakdown(events) -> dict[tuple[str, str], float]:
    """(part, 'fwd' or 'bwd') -> self CPU time in µs over all the profiled events."""
    creator: dict[int, str] = {}  # sequence number -> part of the forward op that made the node
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.sequence_nr >= 0 and engine_node(e) is None:
            creator[e.sequence_nr] = forward_part(e) or ROWS[-1]
    out = collections.Counter()
    for e in events:
        node = engine_node(e)
        if node is None:
            out[forward_part(e) or ROWS[-1], "fwd"] += e.self_cpu_time_total
        elif node.sequence_nr < 0:
            out[ROWS[14], "bwd"] += e.self_cpu_time_total
        else:
            out[creator.get(node.sequence_nr, ROWS[-1]), "bwd"] += e.self_cpu_time_total
    return out


def profile_system(system: str, cfg, device, steps: int) -> tuple[dict, int]:
    """Profile `steps` updates of one system after one untimed update; -> (breakdown, steps)."""
    step, model = train_peer.steppers(cfg, device, [system])[system]
    data, state = TrainBatches(cfg, Dist(device)), TrainState()
    take = lambda: data.take(state, 1)[0]  # noqa: E731
    first = take()
    step(first, float(first.n_tgt_tokens))
    parts = our_parts(model) if system == "ours" else hf_parts(model)
    with regions(parts), function_regions():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                with record_function("part:" + ROWS[0]):
                    batch = take()
                step(batch, float(batch.n_tgt_tokens))
    return breakdown(prof.events()), steps


def table(results: dict[str, tuple[dict, int]]) -> list[str]:
    systems = list(results)
    head = " | ".join(f"{train_peer.SYSTEMS[s]} fwd | bwd | share" for s in systems)
    lines = [f"| part (ms per update) | {head} |", "|---|" + "---:|---:|---:|" * len(systems)]
    totals = {s: sum(r.values()) / n for s, (r, n) in results.items()}
    for row in ROWS:
        cells = []
        for s, (r, n) in results.items():
            fwd, bwd = r.get((row, "fwd"), 0.0) / n, r.get((row, "bwd"), 0.0) / n
            cells.append(
                f"{fwd / 1e3:.1f} | {bwd / 1e3:.1f} | {100 * (fwd + bwd) / totals[s]:.1f}%"
            )
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    total_cells = " | ".join(f"**{totals[s] / 1e3:.0f}** | | 100%" for s in systems)
    return lines + [f"| **total** | {total_cells} |"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="multi30k")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=2, help="profiled updates per system")
    parser.add_argument("--max-tokens", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one thread: every operator on the thread the regions are on
    device = resolve_device(args.device)
    cfg = train_peer.peer_cfg(args.config, device, args.precision, args.max_tokens)
    results = {}
    for system in train_peer.SYSTEMS:
        print(f"profiling {system}", file=sys.stderr)
        results[system] = profile_system(system, cfg, device, args.steps)
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
