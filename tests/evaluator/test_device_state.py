"""The persisting-L2 check through the CUDA driver (cuCtxGetLimit / cuCtxSetLimit), whatever the
CUDA runtime's install layout."""

from __future__ import annotations

import ctypes

import pytest
import torch
from agentforge.evaluator import device_state


def test_without_a_gpu_the_check_answers_none_and_the_reset_says_it_did_nothing() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the gpu test below covers it")
    assert device_state.persisting_l2_bytes() is None
    assert device_state.reset_persisting_l2() is False


def test_the_driver_is_looked_up_by_its_soname_not_a_runtime_path() -> None:
    lib = device_state._driver()
    if lib is not None:  # a machine with the driver installed (no GPU needed to load it)
        assert hasattr(lib, "cuCtxGetLimit") and hasattr(lib, "cuCtxResetPersistingL2Cache")


@pytest.mark.gpu
def test_a_carve_out_set_by_a_candidate_is_seen_and_reset() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.zeros(1, device="cuda")
    lib = device_state._driver()
    assert lib is not None
    assert lib.cuCtxSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(16 << 20)) == 0
    assert (device_state.persisting_l2_bytes() or 0) > 0
    assert device_state.reset_persisting_l2() is True
    assert device_state.persisting_l2_bytes() == 0
