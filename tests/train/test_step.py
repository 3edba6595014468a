"""One update in isolation: accumulation, clipping, non-finite skips, loss scaling, checkpointing,
padding."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.train.conftest import TINY_MODEL
from translator import config
from translator.data.batching import make_batch
from translator.device import cpu_native_bf16
from translator.model.transformer import Transformer
from translator.train.distributed import Dist
from translator.train.loop import loss_sums, train_step
from translator.train.loss import token_loss
from translator.train.precision import amp_dtype, grad_scaler
from translator.train.session import Session

CPU = torch.device("cpu")


def session(*overrides: str, sgd: bool = False, device: torch.device = CPU) -> Session:
    """A tiny model (vocab 40) with its optimizer; SGD(lr=1) makes the update equal to minus the
    gradient."""
    cfg = config.load(
        None,
        [
            *TINY_MODEL,
            "model.dropout=0.0",
            "train.precision=fp32",
            *overrides,
        ],
    )
    torch.manual_seed(0)
    model = Transformer(cfg.model).to(device)
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=1.0)
        if sgd
        else torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    )
    dtype = amp_dtype(cfg.train.precision, device)
    return Session(
        cfg=cfg,
        model=model,
        net=model,
        optimizer=optimizer,
        scaler=grad_scaler(device, dtype),
        tokenizer=None,
        dist=Dist(device),
        dtype=dtype,
        run_dir=Path("unused"),
    )


def sentences(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(4, 40, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


SRC, TGT = sentences(8, 1), sentences(8, 2)
FIRST, SECOND = make_batch(SRC[:4], TGT[:4]), make_batch(SRC[4:], TGT[4:])
BOTH = make_batch(SRC, TGT)


def update(s: Session, batches) -> tuple[dict[str, torch.Tensor], float, bool]:
    """Parameter change of one train_step, its gradient norm and whether it was applied."""
    before = {k: v.detach().clone() for k, v in s.model.named_parameters()}
    tokens = sum(b.n_tgt_tokens for b in batches)
    _, _, norm, ok = train_step(s, batches, tokens)
    return {k: v.detach() - before[k] for k, v in s.model.named_parameters()}, norm, ok


def total_norm(delta: dict[str, torch.Tensor]) -> float:
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(d) for d in delta.values()]))
    )


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], **tol) -> None:
    for key in a:
        torch.testing.assert_close(a[key], b[key], **tol, msg=key)


def test_accumulated_batches_give_the_gradient_of_one_big_batch():
    accumulated, _, _ = update(session(sgd=True), [FIRST, SECOND])
    single, _, _ = update(session(sgd=True), [BOTH])
    assert_close(accumulated, single, rtol=1e-4, atol=1e-6)


def test_the_update_is_minus_the_gradient_of_the_mean_loss_per_target_token():
    """The reference: every position's logits (padding's too), and the plain loss over them."""
    s = session(sgd=True)
    reference = session(sgd=True).model  # same seed: the same starting parameters
    logits = reference(BOTH.src, BOTH.tgt_in, BOTH.src_mask)  # (B, T, V)
    loss, _ = token_loss(logits, BOTH.tgt_out, s.cfg.train.label_smoothing)
    (loss / BOTH.n_tgt_tokens).backward()
    delta, _, _ = update(s, [BOTH])
    assert_close(delta, {k: -p.grad for k, p in reference.named_parameters()}, rtol=1e-4, atol=1e-6)


def test_loss_ignores_padding():
    s = session()
    s.model.eval()
    together, _ = loss_sums(s.model, BOTH, 0.1)
    alone = sum(loss_sums(s.model, make_batch([src], [tgt]), 0.1)[0] for src, tgt in zip(SRC, TGT))
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-4)


def test_clipping_bounds_the_update_and_reports_the_unclipped_norm():
    free, free_norm, _ = update(session(sgd=True), [BOTH])
    assert total_norm(free) == pytest.approx(free_norm, rel=1e-4)
    clipped, norm, ok = update(session("train.clip_grad_norm=0.01", sgd=True), [BOTH])
    assert ok and norm == pytest.approx(free_norm, rel=1e-5) and norm > 0.01
    assert total_norm(clipped) == pytest.approx(0.01, rel=1e-3)


class HostReads(TorchDispatchMode):
    """Logs "read" for each tensor value read on the host (`aten._local_scalar_dense`: `float`,
    `item`, `bool`)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.events.append("read")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("clip", ["0", "1.0"])
def test_no_host_read_follows_the_optimizer_step(clip, monkeypatch):
    """On CUDA the step is queued, not done: a read after it (the returned norm, say) would make
    the host wait for it at every update. (AdamW's own reads, inside its step, are of its step
    counts, which it keeps on the CPU.)"""
    s = session(f"train.clip_grad_norm={clip}")
    optimizer_step = s.optimizer.step

    def step() -> None:
        log.events.append("step")
        optimizer_step()
        log.events.append("stepped")

    with HostReads() as log:
        monkeypatch.setattr(s.optimizer, "step", step)
        _, _, norm, ok = train_step(s, [BOTH], BOTH.n_tgt_tokens)
    assert ok and norm > 0
    assert "read" in log.events[: log.events.index("step")]
    assert "read" not in log.events[log.events.index("stepped") :]


def poison(s: Session) -> torch.utils.hooks.RemovableHandle:
    """Make one gradient NaN, as an overflow would."""
    return s.model.out_proj.weight.register_hook(lambda grad: grad * float("nan"))


def test_non_finite_update_is_skipped_and_not_written():
    s = session()
    handle = poison(s)
    delta, norm, ok = update(s, [BOTH])
    assert not ok and norm != norm  # NaN
    assert all(not d.any() for d in delta.values()) and not s.optimizer.state
    handle.remove()
    delta, _, ok = update(s, [BOTH])
    assert ok and any(d.any() for d in delta.values())


def test_fp16_scaler_backs_off_on_overflow_and_unscales_the_norm():
    s = session("train.precision=fp16")
    assert s.scaler.is_enabled() and s.dtype == torch.float16
    fp32_norm = update(session(), [BOTH])[1]
    scale = s.scaler.get_scale()
    handle = poison(s)
    delta, _, ok = update(s, [BOTH])
    assert not ok and all(not d.any() for d in delta.values())
    assert s.scaler.get_scale() == scale * 0.5
    handle.remove()
    _, norm, ok = update(s, [BOTH])
    assert ok and norm == pytest.approx(fp32_norm, rel=0.05)  # not multiplied by the ~32768 scale


def test_gradient_checkpointing_computes_the_same_update_with_dropout():
    plain = session("model.dropout=0.2", sgd=True)
    checkpointed = session("model.dropout=0.2", "model.gradient_checkpointing=true", sgd=True)
    torch.manual_seed(5)
    a, _, _ = update(plain, [FIRST, SECOND])
    torch.manual_seed(5)
    b, _, _ = update(checkpointed, [FIRST, SECOND])
    assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_precision_choice_on_cpu():
    # auto: bf16 only where this CPU computes it natively, else fp32 (None)
    assert amp_dtype("auto", CPU) == (torch.bfloat16 if cpu_native_bf16() else None)
    assert amp_dtype("bf16", CPU) == torch.bfloat16
    assert (
        not grad_scaler(CPU, torch.bfloat16).is_enabled()
        and grad_scaler(CPU, torch.float16).is_enabled()
    )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_auto_precision_trains_and_matches_fp32_gradient_norm():
    cuda = torch.device("cuda")
    s = session("train.precision=auto", device=cuda)
    assert s.dtype in (torch.bfloat16, torch.float16)
    assert s.scaler.is_enabled() == (s.dtype == torch.float16)
    _, norm, ok = update(s, [BOTH.to(cuda)])
    _, fp32_norm, _ = update(session(device=cuda), [BOTH.to(cuda)])
    assert ok and norm == pytest.approx(fp32_norm, rel=0.05)


class RecordingDDP(torch.nn.Module):
    """Stands in for DDP: records, per forward, whether it ran inside no_sync (gradient all-reduce
    skipped)."""

    def __init__(self, model):
        super().__init__()
        self.module, self.skipping, self.calls = model, False, []

    def forward(self, *args):
        self.calls.append(self.skipping)
        return self.module(*args)

    @contextlib.contextmanager
    def no_sync(self):
        self.skipping = True
        try:
            yield
        finally:
            self.skipping = False


def test_accumulation_all_reduces_on_the_last_batch_only():
    s = session()
    s.net = RecordingDDP(s.model)
    update(s, [FIRST, SECOND, BOTH])
    assert s.net.calls == [True, True, False]


def test_weight_decay_shrinks_linear_matrices_only():
    """With zero gradients an AdamW step is pure decay: linear weights shrink by lr*wd, while
    LayerNorm gains, biases and (tied) embeddings stay as they are."""
    from translator.model.transformer import Transformer
    from translator.train.session import parameter_groups

    cfg = session().cfg.model
    model = Transformer(cfg)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.5), lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in model.named_parameters():
        linear_matrix = p.dim() == 2 and "embed" not in name and name != "out_proj.weight"
        expected = before[name] * (1 - 0.1 * 0.5) if linear_matrix else before[name]
        torch.testing.assert_close(p.detach(), expected, msg=name)
    assert parameter_groups(model, 0.0)[0]["params"] == list(model.parameters())


@pytest.mark.parametrize(
    "vendor, length, flash",
    [("AuthenticAMD", 12, False), ("AuthenticAMD", 70, True), ("GenuineIntel", 12, True)],
)
def test_fp32_cpu_step_chooses_its_attention_kernel_by_cpu_vendor_and_length(
    vendor, length, flash, monkeypatch
):
    """On an AMD CPU, up to SHORT_ATTENTION positions the step's attention is the math path
    (faster there); longer batches, and every batch on an Intel CPU, keep PyTorch's flash kernel."""
    from translator.train import precision

    assert 12 <= precision.SHORT_ATTENTION < 70  # the lengths above, on either side of it
    monkeypatch.setattr(precision, "cpu_vendor", lambda: vendor)
    s = session("model.max_positions=128")
    rows = [[4 + i % 36 for i in range(length - 1)]] * 2  # + EOS / BOS: `length` positions
    batch = make_batch(rows, rows)
    with torch.profiler.profile() as prof:
        train_step(s, [batch], batch.n_tgt_tokens)
    names = {e.key for e in prof.key_averages()}
    assert any("flash_attention" in n for n in names) == flash
    assert any(n == "aten::bmm" for n in names) != flash  # the math path's products


def test_gradient_checkpointing_in_bf16_on_cpu_computes_the_same_update():
    """The recomputed layers run under the forward's attention kernels (the math path that bf16
    training chooses on CPU); another kernel there would save other tensors and fail."""
    plain = session("model.dropout=0.2", "train.precision=bf16", sgd=True)
    checkpointed = session(
        "model.dropout=0.2", "model.gradient_checkpointing=true", "train.precision=bf16", sgd=True
    )
    torch.manual_seed(5)
    a, _, _ = update(plain, [FIRST, SECOND])
    torch.manual_seed(5)
    b, _, _ = update(checkpointed, [FIRST, SECOND])
    assert_close(a, b, rtol=1e-3, atol=1e-5)
