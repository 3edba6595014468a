"""Device and dtype names; `auto` precision follows the CPU's native bf16 (injected, both
answers)."""

from __future__ import annotations

import platform
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import without_length_warnings
from translator import device
from translator.errors import TranslatorError
from translator.train.precision import amp_dtype

CPU = torch.device("cpu")


def test_device_and_dtype_names():
    assert device.resolve_device("cpu").type == "cpu"
    assert device.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert device.resolve_dtype("bf16", CPU) == torch.bfloat16
    # fp32 stays a flag away
    assert device.resolve_dtype("fp32", CPU, cpu_bf16=True) == torch.float32
    assert device.resolve_dtype("fp16", CPU) == torch.float16
    with pytest.raises(TranslatorError, match="dtype"):
        device.resolve_dtype("half", CPU)
    for name in ("gpu", "mps", "meta", "xpu"):
        with pytest.raises(TranslatorError, match="device"):
            device.resolve_device(name)
    if not torch.cuda.is_available():
        with pytest.raises(TranslatorError, match="CUDA"):
            device.resolve_device("cuda")


def test_a_device_error_names_the_setting_that_asked(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TranslatorError, match="CUDA is not available") as err:
        device.resolve_device("cuda:0", "train.device")
    assert err.value.where == "train.device"
    with pytest.raises(TranslatorError) as err:
        device.resolve_device("cuda")
    assert err.value.where == "--device"


@pytest.mark.parametrize("native, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_is_bf16_exactly_where_the_cpu_has_it(native, expected, monkeypatch):
    assert device.resolve_dtype("auto", CPU, cpu_bf16=native) == expected
    monkeypatch.setattr(device, "cpu_native_bf16", lambda: native)  # what load and training ask
    assert device.resolve_dtype("auto", CPU) == expected
    # train.precision: auto
    assert amp_dtype("auto", CPU) == (None if expected == torch.float32 else expected)
    assert amp_dtype("fp32", CPU) is None


def fake_gpus(monkeypatch, majors: list[int], current: int = 0) -> None:
    """torch.cuda as a host with GPUs of these compute capabilities (major versions), all able to
    make bf16 tensors (emulated below 8.0, as on a V100 or T4)."""

    def properties(d=None):
        index = current if d is None else d if isinstance(d, int) else torch.device(d).index
        return SimpleNamespace(major=majors[current if index is None else index], minor=0)

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda d: True)


@pytest.mark.parametrize("major, expected", [(7, torch.float16), (8, torch.bfloat16)])
def test_auto_on_cuda_is_bf16_only_where_the_gpu_computes_it(major, expected, monkeypatch):
    """A V100 (7.0) emulates bf16: auto is fp16 there, with the gradient scaler."""
    fake_gpus(monkeypatch, [major])
    assert device.resolve_dtype("auto", torch.device("cuda")) == expected
    assert amp_dtype("auto", torch.device("cuda:0")) == expected


def test_auto_on_cuda_asks_the_named_device_not_the_current_one(monkeypatch):
    fake_gpus(monkeypatch, [7, 8], current=0)
    assert device.resolve_dtype("auto", torch.device("cuda:1")) == torch.bfloat16
    assert device.resolve_dtype("auto", torch.device("cuda:0")) == torch.float16
    assert device.resolve_dtype("auto", torch.device("cuda")) == torch.float16  # the current one


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").is_file(),
    reason="compares with Linux's x86 CPU flags",
)
def test_native_bf16_detection_agrees_with_the_kernels_cpu_flags():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    assert device.cpu_native_bf16() is bool(flags & {"avx512_bf16", "amx_bf16"})


@pytest.mark.parametrize(
    "lines, vendor",
    [
        ([("processor", "0"), ("vendor_id", " AuthenticAMD"), ("flags", "fpu")], "AuthenticAMD"),
        ([("processor", "0"), ("Features", "fp asimd bf16")], ""),  # Arm names no vendor_id
        ([], ""),  # no /proc/cpuinfo
    ],
)
def test_cpu_vendor_reads_the_first_cpus_vendor_id(lines, vendor, monkeypatch):
    monkeypatch.setattr(device, "_cpuinfo_first_cpu", lambda: lines)
    assert device.cpu_vendor.__wrapped__() == vendor  # past the per-process cache


@pytest.mark.parametrize(
    "asked, dtype, expected",
    [
        (
            "auto",
            torch.bfloat16,
            "cpu, bf16 (auto: this CPU has native bf16; --dtype fp32 for fp32)",
        ),
        ("auto", torch.float32, "cpu, fp32 (auto: this CPU has no native bf16)"),
        ("bf16", torch.bfloat16, "cpu, bf16"),
    ],
)
def test_the_log_says_what_auto_picked(asked, dtype, expected):
    assert device.describe(CPU, dtype, asked) == expected


def test_load_and_the_translate_log_follow_the_cpu(tiny, monkeypatch):
    """`--dtype auto` loads the model in bf16 on a CPU with native bf16, fp32 on one without, and
    says so."""
    from typer.testing import CliRunner

    from translator import cli, loading, stream

    for native, dtype, said in (
        (True, torch.bfloat16, "bf16 (auto: this CPU has native bf16"),
        (False, torch.float32, "fp32 (auto: this CPU has no native bf16)"),
    ):
        monkeypatch.setattr(device, "cpu_native_bf16", lambda native=native: native)
        model, _, _ = loading.load(tiny.path, "cpu", "auto")
        assert next(model.parameters()).dtype == dtype
        result = CliRunner().invoke(
            cli.app, ["translate", str(tiny.path), "--dtype", "auto"], input="A dog.\n"
        )
        assert result.exit_code == 0, result.output
        assert f"translate: cpu, {said}" in result.stderr
    quiet = CliRunner().invoke(cli.app, ["translate", str(tiny.path), "-q"], input="A dog.\n")
    assert quiet.exit_code == 0 and without_length_warnings(quiet.stderr) == ""
    assert len(quiet.stdout.splitlines()) == 1
    assert stream.model_precision(tiny.model, "fp32") == "cpu, fp32"


@pytest.mark.cuda
def test_the_cuda_marker_alone_skips_a_test_without_a_gpu():
    """No skipif here: on a machine without CUDA the marker must skip it (tests/conftest.py), or
    this allocation fails; with a GPU it runs."""
    assert torch.zeros(1, device="cuda").device.type == "cuda"
