"""The Makefile's set-up, run by `make` on a fake venv: PYTHON=true makes no venv, and its
bin/pip only records its arguments (and apt-get on PATH is a no-op), so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")

FAKE_PIP = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../pip.log"
if [ "$1" = freeze ]; then echo torch==2.13.0; fi
"""
# the variables the Makefile reads, and make's own (a `make test` above passes its overrides on)
OUTSIDE = {
    "TORCH_INDEX",
    "VENV",
    "PYTHON",
    "DIR",
    "DATA",
    "CONFIG",
    "AVERAGE",
    "MEMBERS",
    "FP32",
    "ARGS",
}


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    for script, text in ((venv / "bin" / "pip", FAKE_PIP), (tmp_path / "bin" / "apt-get", "")):
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(text or "#!/bin/sh\n")
        script.chmod(0o755)
    return venv


def make(venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in OUTSIDE and k not in ("MAKEFLAGS", "MFLAGS") and not k.startswith("MAKE")
    }
    env["PATH"] = f"{venv.parent / 'bin'}{os.pathsep}{env['PATH']}"  # the no-op apt-get first
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args, f"VENV={venv}", "PYTHON=true"],
        capture_output=True,
        text=True,
        env=env,
    )


def pip_calls(venv: Path) -> list[str]:
    """The pip commands run since the last call (the log is emptied)."""
    log = venv / "pip.log"
    calls = log.read_text().splitlines() if log.is_file() else []
    log.unlink(missing_ok=True)
    return calls


def torch_install(calls: list[str]) -> str:
    (line,) = [c for c in calls if "torch==2.13.0" in c]
    return line


def test_the_torch_index_is_sticky_and_only_a_different_given_one_reinstalls(venv):
    cpu = "https://download.pytorch.org/whl/cpu"
    assert make(venv, "install", f"TORCH_INDEX={cpu}").returncode == 0
    first = torch_install(pip_calls(venv))
    assert f"--index-url {cpu}" in first and "--force-reinstall" not in first
    # a later command without TORCH_INDEX keeps the installed build: nothing runs, -n shows nothing
    assert make(venv, "install").returncode == 0 and pip_calls(venv) == []
    dry = make(venv, "-n", "install")
    assert dry.returncode == 0 and "pip" not in dry.stdout and "torch-index" not in dry.stdout
    # pyproject.toml newer than the install: installs again, from the recorded index, not forced
    os.utime(venv / ".installed", (0, 0))
    assert make(venv, "install").returncode == 0
    again = torch_install(pip_calls(venv))
    assert f"--index-url {cpu}" in again and "--force-reinstall" not in again
    # a given, different index replaces the build; an empty one means pip's default index
    other = "https://download.pytorch.org/whl/cu126"
    assert make(venv, "install", f"TORCH_INDEX={other}").returncode == 0
    assert f"--index-url {other}" in (line := torch_install(pip_calls(venv)))
    assert "--force-reinstall" in line
    assert make(venv, "install", "TORCH_INDEX=").returncode == 0
    line = torch_install(pip_calls(venv))
    assert "--index-url" not in line and "--force-reinstall" in line
    assert make(venv, "install").returncode == 0 and pip_calls(venv) == []


def test_make_alone_lists_the_targets_with_their_descriptions(venv):
    listed = make(venv)
    assert listed.returncode == 0 and listed.stdout == make(venv, "help").stdout
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert {"help", "install", "test", "demo", "multi30k", "lint", "clean"} <= lines.keys()
    assert "the whole suite" in lines["test"] and "DIR=" in lines["multi30k"]
    assert pip_calls(venv) == []  # help installs nothing
