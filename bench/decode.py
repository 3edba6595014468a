"""Decoding speed and memory: our KV-cached search against Hugging Face `generate` and CTranslate2.

    .venv/bin/python -m bench.decode --repeats 2     # all below; the table goes into decode.md
    .venv/bin/python -m bench.decode --sentences 32 --beams 4 --systems ours,ct2 --out ''

The setting CTranslate2 publishes: batch 32, newstest2014 en->de sources, length penalty 0,
beam 4, and greedy beside it. Every model is base size (d_model 512, 6+6 layers, 8 heads, FFN
2048, vocabulary 32000) with random weights (nothing can be downloaded): ours; a MarianMT of the
same size for HF; for CTranslate2 ours itself, converted by our export (float32, and int8 as
`export --quantization int8` stores it). Random weights give gibberish of arbitrary length, so
every sentence of a batch is forced to the same length: L = the longest reference
(newstest2014.de, same tokenizer) in the batch. Ours runs with min_len = max_len = L (EOS forced
at step L), HF with min_new_tokens = max_new_tokens = L + 1, CTranslate2 with
min_decoding_length = max_decoding_length = L + 1: all make L + 1 decoder steps and count
32 x (L + 1) target tokens. dtype int8: ours `--dtype int8` (dynamic int8 linear layers),
CTranslate2 compute_type int8; HF has no int8 run. CPU dtypes default to fp32 and int8, plus
bf16 where the CPU has it natively (emulated bf16 is many times slower: never timed).
Each (system, device, dtype, beam) runs in its own process after one untimed warm-up batch; CPU
peak memory is that process's peak RSS (VmHWM: libraries, model, decoding; the CTranslate2
process imports no torch), shown beside its RSS just before the timed run; CUDA peak memory is
torch.cuda.max_memory_allocated during the timed run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import cpu_model, load_average, memory_mib, versions
from translator.data.tokenizer import Tokenizer, train_sentencepiece

WMT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wmt"
VOCAB = 32000
SYSTEM_NAMES = {
    "ours": "ours (translator)",
    "ours-eager": "ours, no CUDA graphs",
    "hf": "HF MarianMT generate",
    "ct2": "CTranslate2",
}
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8"}
# what each system runs: ours-eager is CUDA-only (on CPU it is ours); HF has no int8 here;
# CTranslate2 runs on CPU in float32 and int8
RUNS = {
    "ours": lambda dev, dt: True,
    "ours-eager": lambda dev, dt: dev == "cuda",
    "hf": lambda dev, dt: dt != "int8",
    "ct2": lambda dev, dt: dev == "cpu" and dt in ("float32", "int8"),
}


def make_batches(n_sentences: int, batch_size: int, workdir: Path) -> list[dict]:
    """newstest2014 sources sorted by length into batches: {'src': ids, 'pieces', 'length': L};
    also leaves the tokenizer at workdir/spm.model."""
    sentences = [
        (WMT / f"newstest2013.{lang}").read_text(encoding="utf-8").splitlines()
        for lang in ("en", "de")
    ]
    model_file = train_sentencepiece(sentences[0] + sentences[1], workdir / "spm", vocab_size=VOCAB)
    tokenizer = Tokenizer(model_file)  # trained on newstest2013, so the test set stays unseen
    src = (WMT / "newstest2014.en").read_text(encoding="utf-8").splitlines()[:n_sentences]
    ref = (WMT / "newstest2014.de").read_text(encoding="utf-8").splitlines()[:n_sentences]
    src_ids, ref_ids = tokenizer.encode(src), tokenizer.encode(ref)
    order = sorted(range(len(src)), key=lambda i: -len(src_ids[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        ids = [src_ids[i] for i in rows]
        batches.append(
            {
                "src": ids,
                "pieces": [tokenizer.sp.id_to_piece(row) + ["</s>"] for row in ids],
                "length": max(len(ref_ids[i]) for i in rows),
            }
        )
    return batches


def worker(spec: dict, workdir: Path) -> dict:
    """One timed run in this process: {'tokens_per_s', 'seconds', 'tokens', 'peak_mib', ...}."""
    batches = json.loads((workdir / "batches.json").read_text())
    if spec["system"] == "ct2":
        from bench import ct2

        decode, params = ct2.load(spec, workdir / "ct2" / spec["dtype"])
    else:
        from bench import decode_systems

        decode, params = decode_systems.load(spec)
    last = batches[-1]
    decode({"src": last["src"][:8], "pieces": last["pieces"][:8], "length": 8})  # warm-up
    rss_before = memory_mib("VmRSS")
    on_cuda = spec["device"] == "cuda"
    if on_cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
    started, tokens = time.perf_counter(), 0
    for batch in batches:
        tokens += decode(batch)
    seconds = time.perf_counter() - started
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's RSS at the fork
    peak = torch.cuda.max_memory_allocated() / 2**20 if on_cuda else memory_mib("VmHWM")
    return {
        **spec,
        "params": params,
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "peak_mib": round(peak),
        "rss_after_warmup_mib": round(rss_before),
    }


def run_all(specs: list[dict], workdir: Path, repeats: int) -> tuple[list[dict], list[list[dict]]]:
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
            command = [sys.executable, "-m", "bench.decode", "--worker", json.dumps(spec)]
            proc = subprocess.run(
                [*command, "--data", str(workdir)], capture_output=True, text=True
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


def _key(r: dict) -> tuple:
    return r["system"], r["device"], r["dtype"], r["beam"]


def ratio(results: list[dict], row: dict, peer: str, dtype: str | None = None) -> float | None:
    """row's tokens/s over `peer`'s at the same device and beam, in `dtype` (None: row's own)."""
    speed = {_key(r): r["tokens_per_s"] for r in results}
    other = speed.get((peer, row["device"], dtype or row["dtype"], row["beam"]))
    return row["tokens_per_s"] / other if other and row["system"] != peer else None


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def table(results: list[dict]) -> str:
    """Markdown rows, beam by beam, with ratios against HF and CTranslate2."""
    lines = [
        "| system | device | dtype | beam | target tokens/s | vs HF, same dtype | vs HF fp32 "
        "| ours / CTranslate2, same dtype | peak memory (MiB) | CPU: RSS before timing (MiB) "
        "| seconds | tokens | parameters |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (-r["beam"], r["device"], r["dtype"])):
        vs_ct2 = ratio(results, r, "ct2") if r["system"].startswith("ours") else None
        params = f"{r['params'] / 1e6:.1f}M" if r["params"] else "-"
        lines.append(
            f"| {SYSTEM_NAMES[r['system']]} | {r['device']} | {DTYPE_NAMES[r['dtype']]} "
            f"| {r['beam']} | {r['tokens_per_s']:.0f} | {_x(ratio(results, r, 'hf'))} "
            f"| {_x(ratio(results, r, 'hf', 'float32'))} | {_x(vs_ct2)} | {r['peak_mib']} "
            f"| {r['rss_after_warmup_mib'] if r['device'] == 'cpu' else '-'} | {r['seconds']} "
            f"| {r['tokens']} | {params} |"
        )
    return "\n".join(lines)


def per_pass(passes: list[list[dict]]) -> list[str]:
    """One line per (ours run, peer) with each pass's ratio and both sides' tokens/s and peak
    memory: the machine's speed drifts, and a ratio within one pass is the fairer one."""
    lines = []
    for row in passes[0]:
        if not row["system"].startswith("ours"):
            continue
        for peer in ("hf", "ct2"):
            cells = []
            for runs in passes:
                mine = next(r for r in runs if _key(r) == _key(row))
                theirs = [r for r in runs if _key(r) == (peer, *_key(row)[1:])]
                if theirs:
                    cells.append(
                        f"{mine['tokens_per_s']:.0f} ({mine['peak_mib']} MiB) / "
                        f"{theirs[0]['tokens_per_s']:.0f} ({theirs[0]['peak_mib']} MiB) = "
                        f"{_x(ratio(runs, mine, peer))}"
                    )
            if cells:
                lines.append(
                    f"- {row['system']} / {peer}, {row['device']} {DTYPE_NAMES[row['dtype']]} "
                    f"beam {row['beam']}: " + "; ".join(cells)
                )
    return lines


def insert_section(page: str, section: str) -> str:
    """`section` placed after the page's title line, older sections kept below it."""
    title, _, rest = page.partition("\n")
    return f"{title}\n\n{section.strip()}\n\n{rest.lstrip()}"


def default_cpu_dtypes() -> str:
    from translator.device import cpu_native_bf16

    return "float32,int8" + (",bfloat16" if cpu_native_bf16() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beams", default="4,1", help="Beam sizes (1 = greedy).")
    parser.add_argument("--cpu-dtypes", help="Default: float32,int8 (+bfloat16 where native).")
    parser.add_argument("--cuda-dtypes", default="float16,bfloat16")
    parser.add_argument("--systems", default="ours,ours-eager,hf,ct2")
    parser.add_argument(
        "--threads", type=int, help="CPU threads of every system (default: torch's, the cores)."
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="Runs per configuration; the fastest counts."
    )
    parser.add_argument(
        "--out", default="docs/benchmarks/decode.md", help="Page to add the results to ('': none)."
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.load_average = load_average()  # before this run adds its own load
    if args.worker:  # the CTranslate2 worker must not import torch: nothing above does
        print(json.dumps(worker(json.loads(args.worker), args.data)))
        return
    report(args)


def report(args: argparse.Namespace) -> None:
    """Run every spec, print the table and per-pass ratios, and add them to --out."""
    import torch

    cpu_dtypes = default_cpu_dtypes() if args.cpu_dtypes is None else args.cpu_dtypes
    runs = [("cpu", d) for d in cpu_dtypes.split(",") if d]
    if torch.cuda.is_available():
        runs += [("cuda", d) for d in args.cuda_dtypes.split(",") if d]
    systems = args.systems.split(",")
    if "ct2" in systems and importlib.util.find_spec("ctranslate2") is None:
        print("ctranslate2 is not installed: CTranslate2 left out", file=sys.stderr)
        systems.remove("ct2")
    threads = args.threads or torch.get_num_threads()
    specs = [
        {"system": s, "device": dev, "dtype": dt, "beam": int(beam), "threads": threads}
        for beam in args.beams.split(",")
        for dev, dt in runs
        for s in systems
        if RUNS[s](dev, dt)
    ]
    if not specs:
        raise SystemExit("nothing to run: no dtype or system fits this machine")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        batches = make_batches(args.sentences, args.batch_size, workdir)
        (workdir / "batches.json").write_text(json.dumps(batches))
        if any(spec["system"] == "ct2" for spec in specs):
            from bench.decode_systems import export_ct2

            export_ct2(workdir / "spm.model", workdir / "ct2")
        results, passes = run_all(specs, workdir, args.repeats)
    machine = ", ".join(
        part
        for part in (
            cpu_model(),
            f"threads per system: {threads}",
            f"torch {torch.__version__}",
            versions("transformers", "ctranslate2"),
            args.load_average,
            torch.cuda.get_device_name() if torch.cuda.is_available() else "",
        )
        if part
    )
    command = shlex.join(["python", "-m", "bench.decode", *sys.argv[1:]])
    section = "\n".join(
        [
            f"## {datetime.datetime.now():%Y-%m-%d %H:%M}: `{command}` (written by it)",
            "",
            f"{machine}; {args.sentences} sentences, batch {args.batch_size}; best of "
            f"{args.repeats}; forced lengths L per batch: {[b['length'] for b in batches]}.",
            "",
            table(results),
            "",
            "Per pass, ours / peer (tokens/s, peak memory):",
            "",
            *per_pass(passes),
        ]
    )
    print(section)
    if args.out:
        from translator.files import atomic_write

        out = Path(args.out)
        page = out.read_text(encoding="utf-8") if out.exists() else "# Decoding speed\n"
        with atomic_write(out) as handle:
            handle.write(insert_section(page, section))


if __name__ == "__main__":
    main()
