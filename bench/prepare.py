"""`translator prepare` at WMT scale: wall-clock, peak memory, cache hit, and time to the first
training step.

    .venv/bin/python -m bench.prepare        # 4.5M pairs, results to docs/benchmarks/prepare.md
    .venv/bin/python -m bench.prepare --pairs 300000 --no-write   # a quick look

The corpus is Multi30k's training data repeated until it has --pairs pairs; every copy after the
first gets its copy number appended to both sides, so deduplication keeps them (valid and test
are Multi30k's). It is generated under --work (default /tmp), never in the repository. Each
measured command runs as a child process: wall-clock from the parent, peak memory = the child's
maximum resident set size (getrusage), including memory-mapped file pages it touched.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.machine import cpu_model, load_average
from translator import config
from translator.files import atomic_write

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
PYTHON = sys.executable
# configs/base.yaml's data section (32k BPE, WMT14 en->de) on the generated corpus
DATA_SETTINGS = ["data.name=bench-4.5m", "data.splits.valid=valid", "data.splits.test=test"]
# time to first step: the tiny model, so that the measure is start-up, not a slow first update
TRAIN_SETTINGS = [
    "model.d_model=256",
    "model.n_heads=4",
    "model.n_encoder_layers=2",
    "model.n_decoder_layers=2",
    "model.d_ff=512",
    "train.max_tokens=4096",
    "train.grad_accum_steps=1",
    "train.max_updates=1000",
]

FIRST_STEP = """
import sys, time, os
from translator import config
from translator.train import loop
original = loop.train_step
def first(*args, **kwargs):
    print(f"FIRST_STEP {time.time()}", flush=True)
    original(*args, **kwargs)
    print(f"FIRST_DONE {time.time()}", flush=True)
    os._exit(0)
loop.train_step = first
loop.run(config.load(sys.argv[1], sys.argv[2:]), quiet=True)
"""


def make_corpus(root: Path, pairs: int) -> None:
    """train.{en,de}: Multi30k's training pairs repeated, copy k > 0 with ` k` appended to both
    sides."""
    root.mkdir(parents=True, exist_ok=True)
    for split, name in (("valid", "valid"), ("test", "test2016")):
        for lang in ("en", "de"):
            (root / f"{split}.{lang}").write_bytes((MULTI30K / f"{name}.{lang}").read_bytes())
    for lang in ("en", "de"):
        lines = (MULTI30K / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        with open(root / f"train.{lang}", "w", encoding="utf-8") as out:
            for start in range(0, pairs, len(lines)):
                copy = start // len(lines)
                chunk = lines[: pairs - start]
                out.write(
                    "\n".join(chunk if copy == 0 else [f"{line} {copy}" for line in chunk]) + "\n"
                )


def timed(command: list[str]) -> tuple[float, int, str]:
    """(seconds, largest peak RSS in bytes of the children so far, stdout) of one child process.

    prepare runs first, so the peak read right after it is its own.
    """
    started = time.time()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.time() - started
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-3000:]}")
    # KiB on Linux
    return (seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/translator-bench-prepare"))
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--set", action="append", default=[], help="extra data.* overrides")
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave docs/benchmarks/prepare.md"
    )
    args = parser.parse_args()
    args.load_average = load_average()  # before this run adds its own load
    corpus, data_dir = args.work / "corpus", args.work / "data"
    settings = [f"data.source={corpus}", f"data.data_dir={data_dir}", *DATA_SETTINGS, *args.set]
    started = time.time()
    make_corpus(corpus, args.pairs)
    print(f"corpus: {args.pairs:,} pairs in {time.time() - started:.0f} s under {corpus}")

    prepare = [PYTHON, "-m", "translator", "prepare", args.config, "--quiet", "--force"]
    prepare += [f"--set={s}" for s in settings]
    seconds, peak, _ = timed(prepare)
    manifest = json.loads((data_dir / "bench-4.5m" / "manifest.json").read_text())
    print(f"prepare: {seconds:.0f} s, peak RSS {peak / 2**30:.2f} GiB")
    hit, _, _ = timed([arg for arg in prepare if arg != "--force"])
    print(f"cache hit: {hit:.2f} s")

    run_dir = args.work / "run"
    train = [
        PYTHON,
        "-c",
        FIRST_STEP,
        args.config,
        *settings,
        *TRAIN_SETTINGS,
        f"train.run_dir={run_dir}",
    ]
    started = time.time()
    _, _, out = timed(train)
    first_step, first_done = (
        float(out.split(key)[1].split()[0]) - started for key in ("FIRST_STEP ", "FIRST_DONE ")
    )
    print(
        f"training: first update starts {first_step:.1f} s after start, done at {first_done:.1f} s"
    )
    if not args.no_write:
        write_results(args, seconds, peak, hit, (first_step, first_done), manifest)


def write_results(
    args, seconds: float, peak: int, hit: float, first: tuple[float, float], manifest: dict
) -> None:
    pass_fail = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    data = config.load(args.work / "data" / "bench-4.5m" / "config.yaml").data.__dict__
    dropped = ", ".join(f"{rule} {n:,}" for rule, n in manifest["dropped"].items())
    lines = [
        "# `translator prepare` at WMT scale",
        "",
        f"Date: {datetime.date.today()}. Machine: {cpu_model()}, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, Python "
        f"{platform.python_version()}; {args.load_average}.",
        "",
        f"Command: `.venv/bin/python -m bench.prepare --pairs {args.pairs}` (data section of "
        f"{args.config}: {data['spm_model_type']} SentencePiece, "
        f"vocab_size {data['vocab_size']:,}, joint_vocab {data['joint_vocab']}, "
        f"input_sentence_size {data['input_sentence_size']:,}; extra settings: "
        f"{' '.join(args.set) or 'none'}).",
        "",
        "Corpus: Multi30k's 29,000 training pairs repeated, copy k > 0 with ` k` appended to both "
        "sides; valid and test from Multi30k (valid, test2016).",
        "",
        "| measure | result | target |",
        "| --- | --- | --- |",
        f"| prepare wall-clock | {seconds:.0f} s | <= 600 s ({pass_fail(seconds <= 600)}) |",
        f"| prepare peak memory (max RSS) | {peak / 2**30:.2f} GiB | <= 4 GiB "
        f"({pass_fail(peak <= 4 * 2**30)}) |",
        f"| rerun, same config (cache hit, whole CLI) | {hit:.2f} s | < 2 s ({pass_fail(hit < 2)}) "
        "|",
        f"| training: first update starts, after process start | {first[0]:.1f} s | <= 10 s "
        f"({pass_fail(first[0] <= 10)}) |",
        f"| training: first update done | {first[1]:.1f} s | (one fp32 CPU update of the small "
        "model) |",
        "",
        f"Pairs in {manifest['pairs_in']:,}; dropped: {dropped}; out "
        f"{manifest['pairs']['train']:,}. Train tokens src/tgt "
        f"{manifest['tokens']['train']['src']:,} / {manifest['tokens']['train']['tgt']:,} "
        f"({manifest['vocab']['src']['id_dtype']}).",
        "",
        "Steps of the prepare run (wall-clock seconds, from the manifest's step_seconds):",
        "",
        "| step | seconds |",
        "| --- | --- |",
        *[f"| {step} | {sec:.1f} |" for step, sec in manifest.get("step_seconds", {}).items()],
        "",
        "The first-step run uses a 2+2-layer d_model 256 model (train.max_tokens 4096, no "
        "accumulation) on the prepared data, so it measures start-up: imports, opening the "
        "memory-mapped ids, length-bucketed batching "
        "of all pairs, model set-up, then one update.",
        "",
    ]
    with atomic_write(REPO / "docs" / "benchmarks" / "prepare.md") as handle:
        handle.write("\n".join(lines))


if __name__ == "__main__":
    main()
