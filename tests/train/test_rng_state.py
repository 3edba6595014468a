"""The CUDA RNG state a checkpoint keeps is this process's device's: a resume where fewer GPUs are
visible restores it (on CPU: torch.cuda monkeypatched to fake generators). Seeds past NumPy's range
wrap around."""

from __future__ import annotations

import pytest
import torch
import torch.cuda.random as cuda_random

from translator.train import state


class FakeGenerator:
    def __init__(self, index: int) -> None:
        self.state = torch.full((16,), index, dtype=torch.uint8)

    def get_state(self) -> torch.Tensor:
        return self.state.clone()

    def set_state(self, new_state: torch.Tensor) -> None:
        self.state = new_state.clone()


@pytest.fixture
def gpus(monkeypatch):
    """fake(n, current): a host with n visible GPUs, `current` the current one; returns their
    generators (torch.cuda's own RNG functions run over them)."""

    def fake(n: int, current: int = 0) -> list[FakeGenerator]:
        generators = [FakeGenerator(i) for i in range(n)]
        monkeypatch.setattr(torch.cuda, "default_generators", tuple(generators))
        for module in (torch.cuda, cuda_random):
            monkeypatch.setattr(module, "current_device", lambda: current)
            monkeypatch.setattr(module, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda_random, "_lazy_init", lambda: None)
        monkeypatch.setattr(cuda_random, "_lazy_call", lambda callback, **kw: callback())
        monkeypatch.setattr(cuda_random, "is_initialized", lambda: True)
        return generators

    return fake


def test_a_save_keeps_the_current_device_s_state_alone(gpus):
    gpus(4, current=2)
    assert torch.equal(state.rng_state()["cuda"], torch.full((16,), 2, dtype=torch.uint8))


def test_a_resume_restores_it_into_the_current_device(gpus):
    saved = state.rng_state() | {"cuda": torch.full((16,), 7, dtype=torch.uint8)}
    generators = gpus(2, current=1)
    state.set_rng_state(saved)
    assert generators[1].state.eq(7).all() and generators[0].state.eq(0).all()


def test_an_older_checkpoint_s_list_gives_each_process_its_device_s_entry(gpus):
    """Before, every process saved every visible device's state (an 8-GPU DDP rank r: 8 states,
    its own at index r)."""
    saved = state.rng_state() | {
        "cuda": [torch.full((16,), 10 + i, dtype=torch.uint8) for i in range(8)]
    }
    generators = gpus(8, current=3)
    state.set_rng_state(saved)
    assert generators[3].state.eq(13).all()
    # CUDA_VISIBLE_DEVICES=0 after an 8-GPU run: the first, not an IndexError
    generators = gpus(1)
    state.set_rng_state(saved)
    assert generators[0].state.eq(10).all()


def test_a_checkpoint_saved_without_cuda_leaves_the_gpu_s_state(gpus):
    saved = state.rng_state()  # no CUDA yet
    assert saved["cuda"] is None
    for cuda in (None, []):  # [] is an older checkpoint's
        generators = gpus(1)
        state.set_rng_state(saved | {"cuda": cuda})
        assert generators[0].state.eq(0).all()


def test_one_process_on_cuda_n_makes_it_current(monkeypatch):
    """So that the state saved is that of the device it trains on, not cuda:0's."""
    from translator.train import distributed

    made_current = []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", made_current.append)
    assert distributed.init("cuda:1").device == torch.device("cuda", 1)
    distributed.init("cuda")  # the current device already
    assert made_current == [torch.device("cuda", 1)]


def draws() -> tuple:
    import random

    import numpy as np

    return random.random(), np.random.rand(), torch.rand(()).item()


@pytest.mark.parametrize("offset", [1, 3 + 1000])  # rank 1; rank 3 resumed at update 1000
def test_the_top_seed_plus_a_rank_or_update_wraps_around(offset):
    """train.seed may be 2**32 - 1; startup adds the rank, a resume the rank and the update."""
    state.seed_all(2**32 - 1 + offset)
    top = draws()
    state.seed_all(offset - 1)
    assert top == draws()
