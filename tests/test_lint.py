"""Lint is part of the suite: `ruff check` and `ruff format --check` over translator/, tests/ and
bench/, so `make test` (what CI runs) fails on a long line or unformatted code.

Skipped where ruff is not installed (it comes with the dev extra).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

PATHS = ["translator", "tests", "bench"]


def _ruff() -> list[str]:
    """The ruff of this Python's environment, else one on PATH; skips the test without either."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return [found]


def _run(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    # --no-cache: a test run leaves no .ruff_cache behind
    return subprocess.run(
        [*_ruff(), *args, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ruff_check_passes():
    result = _run("check", *PATHS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_ruff_formatted():
    result = _run("format", "--check", *PATHS)
    assert result.returncode == 0, (
        "run `make format` (ruff format translator tests bench):\n" + result.stdout + result.stderr
    )


def test_the_project_config_rejects_a_line_over_100_columns(tmp_path):
    """The line-length rule (E501) is on: 100 columns pass, 101 fail, comments included."""
    ok = "# " + "x" * 98 + "\n"
    long = "# " + "x" * 99 + "\n"
    (tmp_path / "ok.py").write_text(ok)
    (tmp_path / "long.py").write_text(long)
    config = str(REPO / "pyproject.toml")
    assert _run("check", "--config", config, "ok.py", cwd=tmp_path).returncode == 0
    result = _run("check", "--config", config, "long.py", cwd=tmp_path)
    assert result.returncode == 1 and "E501" in result.stdout, result.stdout + result.stderr
