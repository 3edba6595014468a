"""The commands' text on stdin and stdout is UTF-8 whatever the locale says (as Marian's,
sacreBLEU's and CTranslate2's): a C locale neither crashes on an umlaut nor garbles it."""

from __future__ import annotations

import copy
import os
import subprocess

import pytest
import torch

from tests.test_cli import CLI, REPO

# Python's own fallbacks turned off: it would otherwise switch a C locale to UTF-8 by itself
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
UTF8_LOCALE = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


def run_in(locale: dict[str, str], *args: str, stdin: bytes) -> subprocess.CompletedProcess:
    """The real CLI under `locale`, bytes in and out (no decoding on our side to hide anything)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONIOENCODING", "LC_CTYPE", "LANGUAGE"}
    }
    env |= locale | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, cwd=REPO, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def umlaut_model(tiny, tmp_path_factory):
    """The tiny model made to answer every line with "ü"s: the final norm gives one constant
    vector, and only the piece holding "ü" has a weight to score it."""
    from translator import checkpoint

    pieces = [tiny.tokenizer.sp.id_to_piece(i) for i in range(tiny.tokenizer.vocab_size)]
    umlaut = next(i for i, piece in enumerate(pieces) if "ü" in piece)
    model = copy.deepcopy(tiny.model)
    with torch.no_grad():
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.fill_(1.0)
        model.out_proj.weight.zero_()
        model.out_proj.weight[umlaut].fill_(1.0)
    path = tmp_path_factory.mktemp("umlaut") / "umlaut.pt"
    checkpoint.save(path, model, tiny.cfg, tiny.tokenizer)
    return path


def test_translate_writes_utf8_under_a_c_locale(umlaut_model):
    lines = "Ein Mädchen läuft über die Straße.\nA dog.\n"
    result = run_in(C_LOCALE, "translate", str(umlaut_model), "-q", stdin=lines.encode())
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    out = result.stdout.decode("utf-8")  # Latin-1 or escapes would fail here, or lose the "ü"
    assert out.count("\n") == 2 and "ü" in out
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("given", ["stdin", "argument"])
def test_attention_reads_utf8_under_a_c_locale(tiny, tmp_path, given):
    args = ["attention", str(tiny.path), "--device", "cpu", "-o", str(tmp_path)]
    stdin = "café\n".encode()
    if given == "argument":
        args, stdin = [*args, "café"], b""
    c = run_in(C_LOCALE, *args, stdin=stdin)
    utf8 = run_in(UTF8_LOCALE, *args, stdin=stdin)
    assert c.returncode == 0, c.stderr.decode(errors="replace")
    assert "0: café\n" in c.stdout.decode("utf-8")  # reached the model as written
    assert c.stdout == utf8.stdout


def test_a_non_ascii_error_under_a_c_locale_is_one_line(tmp_path):
    """stderr keeps the locale's encoding: what it cannot show is escaped, never a crash."""
    result = run_in(C_LOCALE, "translate", str(tmp_path / "Übersetzer.pt"), stdin=b"A dog.\n")
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.startswith(b"error: ") and result.stderr.count(b"\n") == 1
