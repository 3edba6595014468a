"""Beam-search speed: our KV-cached search against Hugging Face `generate` on a same-size MarianMT.

    # CPU fp32 + bf16; CUDA fp16/bf16 (with and without CUDA graphs) when present
    .venv/bin/python -m bench.decode
    .venv/bin/python -m bench.decode --sentences 64 --cpu-dtypes bfloat16 --systems ours

The setting CTranslate2 publishes: beam 4, batch 32, newstest2014 en->de sources, length
penalty 0. Both models are base size (d_model 512, 6+6 layers, 8 heads, FFN 2048, vocabulary
32000) with random weights (nothing can be downloaded), so outputs are gibberish of arbitrary
length. To compare equal work, every sentence of a batch is forced to the same output length:
L = the longest reference (newstest2014.de, same tokenizer) in the batch, plus EOS. Ours runs
with min_len = max_len = L (EOS is forced at step L); HF with min_new_tokens = max_new_tokens =
L + 1. Both make L + 1 decoder steps over 32 x 4 rows and count 32 x (L + 1) target tokens.
Each (system, device, dtype) runs in its own process after one untimed warm-up batch; CPU peak
memory is that process's peak RSS (ru_maxrss: libraries, the model as built in fp32, then
decoding), shown beside its RSS just before the timed run; CUDA peak memory is
torch.cuda.max_memory_allocated during the timed run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from translator.data.tokenizer import Tokenizer, train_sentencepiece

WMT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wmt"
BASE = dict(vocab=32000, d_model=512, layers=6, heads=8, ffn=2048, max_positions=1024)
MIB = 2**20
SYSTEM_NAMES = {
    "ours": "ours (translator)",
    "ours-eager": "ours, no CUDA graphs",
    "hf": "HF MarianMT generate",
}


def make_batches(n_sentences: int, batch_size: int, workdir: Path) -> list[dict]:
    """newstest2014 sources, sorted by length into batches: {'src': ids lists, 'length': L}."""
    sentences = [
        (WMT / f"newstest2013.{lang}").read_text(encoding="utf-8").splitlines()
        for lang in ("en", "de")
    ]
    model_file = train_sentencepiece(
        sentences[0] + sentences[1], workdir / "spm", vocab_size=BASE["vocab"]
    )
    tokenizer = Tokenizer(model_file)  # trained on newstest2013, so the test set stays unseen
    src = (WMT / "newstest2014.en").read_text(encoding="utf-8").splitlines()[:n_sentences]
    ref = (WMT / "newstest2014.de").read_text(encoding="utf-8").splitlines()[:n_sentences]
    src_ids, ref_ids = tokenizer.encode(src), tokenizer.encode(ref)
    order = sorted(range(len(src)), key=lambda i: -len(src_ids[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batches.append(
            {"src": [src_ids[i] for i in rows], "length": max(len(ref_ids[i]) for i in rows)}
        )
    return batches


def build(
    system: str, device: torch.device, dtype: torch.dtype, cpu_kernels: bool = True
) -> torch.nn.Module:
    """A randomly initialised base model, ours or Hugging Face MarianMT, in eval mode.

    Ours on CPU gets the conversion `translate.load` applies (model/inference.py) unless not
    `cpu_kernels`.
    """
    torch.manual_seed(0)
    if system.startswith("ours"):
        from translator.config import ModelConfig
        from translator.model.inference import for_cpu_decoding
        from translator.model.transformer import Transformer

        model = Transformer(
            ModelConfig(
                vocab_size=BASE["vocab"],
                d_model=BASE["d_model"],
                n_heads=BASE["heads"],
                n_encoder_layers=BASE["layers"],
                n_decoder_layers=BASE["layers"],
                d_ff=BASE["ffn"],
                dropout=0.0,
                max_positions=BASE["max_positions"],
            )
        )
        model = model.to(device, dtype).eval()
        if device.type == "cpu" and cpu_kernels:
            for_cpu_decoding(model)
        return model
    else:
        from transformers import MarianConfig, MarianMTModel

        config = MarianConfig(
            vocab_size=BASE["vocab"],
            decoder_vocab_size=BASE["vocab"],
            d_model=BASE["d_model"],
            encoder_layers=BASE["layers"],
            decoder_layers=BASE["layers"],
            encoder_attention_heads=BASE["heads"],
            decoder_attention_heads=BASE["heads"],
            encoder_ffn_dim=BASE["ffn"],
            decoder_ffn_dim=BASE["ffn"],
            max_position_embeddings=BASE["max_positions"],
            activation_function="relu",
            scale_embedding=True,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
            decoder_start_token_id=2,
            forced_eos_token_id=None,
        )
        model = MarianMTModel(config)
    return model.to(device, dtype).eval()


def decode_batch(system: str, model, batch: dict, beam: int, device: torch.device) -> int:
    """Beam-search one batch to exactly L tokens + EOS; returns the target tokens produced."""
    from translator.data.batching import pad, padding_mask
    from translator.data.tokenizer import EOS_ID

    src = pad(batch["src"], suffix=[EOS_ID]).to(device)  # (B, S)
    L = batch["length"]
    if system.startswith("ours"):
        from translator.decode.beam import beam_search

        hyps = beam_search(
            model,
            src,
            padding_mask(src),
            beam_size=beam,
            alpha=0.0,
            max_len_a=0.0,
            max_len_b=L,
            min_len=L,
            cuda_graphs=system == "ours",
        )
        assert all(len(h[0].tokens) == L for h in hyps)
    else:
        with torch.inference_mode():
            out = model.generate(
                input_ids=src,
                attention_mask=src != 0,
                num_beams=beam,
                length_penalty=0.0,
                min_new_tokens=L + 1,
                max_new_tokens=L + 1,
                early_stopping=False,
                do_sample=False,
                use_cache=True,
            )
        assert out.shape[1] == L + 2  # decoder start token + L + 1 generated
    return len(batch["src"]) * (L + 1)


def worker(spec: dict, batches: list[dict]) -> dict:
    """One timed run in this process: {'tokens_per_s', 'seconds', 'tokens', 'peak_mib', ...}."""
    device, dtype = torch.device(spec["device"]), getattr(torch, spec["dtype"])
    model = build(spec["system"], device, dtype)
    params = sum(p.numel() for p in model.parameters())
    # warm-up
    decode_batch(
        spec["system"], model, {"src": batches[-1]["src"][:8], "length": 8}, spec["beam"], device
    )
    rss_before = _current_rss_mib()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started, tokens = time.perf_counter(), 0
    for batch in batches:
        tokens += decode_batch(spec["system"], model, batch, spec["beam"], device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = (
        torch.cuda.max_memory_allocated() / MIB
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    return {
        **spec,
        "params": params,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "peak_mib": round(peak),
        "rss_after_warmup_mib": round(rss_before),
    }


def _current_rss_mib() -> float:
    """Resident memory now (not the peak), from /proc; 0 where there is no /proc."""
    try:
        fields = Path("/proc/self/status").read_text().split("VmRSS:")[1].split()
        return int(fields[0]) / 1024  # kB
    except (OSError, IndexError, ValueError):
        return 0.0


def run_all(
    specs: list[dict], data_file: Path, repeats: int
) -> tuple[list[dict], list[list[dict]]]:
    """Each spec in a fresh process (clean peak memory), all specs `repeats` times interleaved so
    that load from other users of a shared machine hits every system alike.

    Returns the fastest run of each spec, and every pass's runs (for the per-pass ratios).
    """
    best: dict[str, dict] = {}
    passes: list[list[dict]] = []
    for attempt in range(repeats):
        passes.append([])
        for spec in specs:
            print(f"run {attempt + 1}/{repeats}: {spec}", file=sys.stderr, flush=True)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.decode",
                    "--worker",
                    json.dumps(spec),
                    "--data",
                    str(data_file),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(f"worker {spec} failed:\n{proc.stderr[-3000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            print(
                f"  {result['tokens_per_s']} tokens/s, peak {result['peak_mib']} MiB",
                file=sys.stderr,
                flush=True,
            )
            passes[-1].append(result)
            key = json.dumps(spec)
            if key not in best or result["tokens_per_s"] > best[key]["tokens_per_s"]:
                best[key] = result
    return list(best.values()), passes


def speedups(results: list[dict]) -> dict[tuple[str, str, str], float]:
    """(system, device, dtype) -> that system's / HF's tokens per second, where both ran."""
    speed = {(r["system"], r["device"], r["dtype"]): r["tokens_per_s"] for r in results}
    return {
        (system, dev, dt): tps / speed["hf", dev, dt]
        for (system, dev, dt), tps in speed.items()
        if system != "hf" and ("hf", dev, dt) in speed
    }


def table(results: list[dict]) -> str:
    """Markdown rows with the speed-up of ours over HF at the same device and dtype."""
    ratios = speedups(results)
    lines = [
        "| system | device | dtype | target tokens/s | speed-up vs HF | seconds | tokens "
        "| peak memory (MiB) | CPU: RSS before timing (MiB) | parameters |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ratio = 1.0 if r["system"] == "hf" else ratios.get((r["system"], r["device"], r["dtype"]))
        name = SYSTEM_NAMES[r["system"]]
        lines.append(
            f"| {name} | {r['device']} | {r['dtype']} | {r['tokens_per_s']:.0f} | "
            f"{f'{ratio:.2f}x' if ratio else '-'} | {r['seconds']} | {r['tokens']} | "
            f"{r['peak_mib']} | {r['rss_after_warmup_mib'] if r['device'] == 'cpu' else '-'} | "
            f"{r['params'] / 1e6:.1f}M |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--cpu-dtypes", default="float32,bfloat16")
    parser.add_argument("--cuda-dtypes", default="float16,bfloat16")
    parser.add_argument(
        "--systems",
        default="ours,ours-eager,hf",
        help="ours-eager (decode.cuda_graphs off) runs on CUDA only: on CPU it is ours.",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="Runs per configuration; the fastest counts."
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), torch.load(args.data))))
        return
    runs = [("cpu", d) for d in args.cpu_dtypes.split(",") if d]
    if torch.cuda.is_available():
        runs += [("cuda", d) for d in args.cuda_dtypes.split(",") if d]
    if not runs:
        raise SystemExit("nothing to run: --cpu-dtypes is empty and there is no CUDA device here")
    specs = [
        {"system": s, "device": dev, "dtype": dt, "beam": args.beam}
        for dev, dt in runs
        for s in args.systems.split(",")
        if not (s == "ours-eager" and dev == "cpu")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        batches = make_batches(args.sentences, args.batch_size, Path(tmp))
        torch.save(batches, Path(tmp) / "batches.pt")
        results, passes = run_all(specs, Path(tmp) / "batches.pt", args.repeats)
    machine = (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
    )
    print(
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}; {machine}; {args.sentences} sentences, batch "
        f"{args.batch_size}, beam {args.beam}; best of {args.repeats}; forced lengths L per batch: "
        f"{[b['length'] for b in batches]}\n"
    )
    print(table(results))
    # the machine's speed drifts: show each pass's own ratio
    per_pass = [speedups(runs) for runs in passes]
    for key in per_pass[0]:
        system, device, dtype = key
        print(
            f"\nper pass, {system} / HF, {device} {dtype}: "
            + ", ".join(f"{ratios[key]:.2f}x" for ratios in per_pass)
        )


if __name__ == "__main__":
    main()
