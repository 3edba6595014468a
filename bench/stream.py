"""A long `translator translate` stream: wall time and peak memory of whole processes.

    .venv/bin/python -m bench.stream runs/tiny/best.pt ../shared/data/multi30k/train.en \
        --rounds 2 --checkouts OLD_CHECKOUT,. --env "ONEDNN_PRIMITIVE_CACHE_CAPACITY=16"

Each variant runs `python -m translator translate CKPT -q < INPUT` in a process of its own, the
variants alternating within each round (their order reversed every other round). A variant is a
checkout (the command runs there, so that checkout's code is the one imported) or a set of
environment variables for this checkout (`--env "A=1 B=2"`, repeatable). Peak memory is the
process's own (its rusage), so what a long stream leaves resident shows, as the in-process
benchmarks cannot.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.machine import cpu_model, load_average


def run_once(ckpt: Path, source: Path, cwd: Path, env: dict[str, str], extra: list[str]) -> tuple:
    """(seconds, peak RSS in MiB, exit code) of one translate process."""
    command = [sys.executable, "-m", "translator", "translate", str(ckpt), "-q", *extra]
    began = time.perf_counter()
    with open(source, "rb") as stdin:
        process = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, **env},
        )
        _, status, usage = os.wait4(process.pid, 0)  # this process's own peak
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
    return time.perf_counter() - began, usage.ru_maxrss / 1024, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("source", help="a text file, one sentence per line")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--checkouts", default=".", help="comma-separated checkouts to compare")
    parser.add_argument("--env", action="append", default=[], help='"NAME=VALUE ..." variant')
    parser.add_argument("--args", default="", help='translate options, e.g. "--dtype fp32"')
    args = parser.parse_args()
    ckpt, source = Path(args.ckpt).resolve(), Path(args.source).resolve()
    variants = [(f"checkout {c}", Path(c).resolve(), {}) for c in args.checkouts.split(",")]
    for spec in args.env:
        env = dict(item.split("=", 1) for item in spec.split())
        variants.append((spec, Path(".").resolve(), env))
    print(f"{cpu_model()}, {load_average()}; {ckpt.name} < {source}")
    for round_ in range(args.rounds):
        for name, cwd, env in variants if round_ % 2 == 0 else variants[::-1]:
            seconds, peak, code = run_once(ckpt, source, cwd, env, args.args.split())
            print(f"round {round_ + 1} {name}: {seconds:.1f} s, peak {peak:,.0f} MiB, exit {code}")


if __name__ == "__main__":
    main()
