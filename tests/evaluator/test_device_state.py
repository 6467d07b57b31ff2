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


class _AccessPolicyWindow(ctypes.Structure):
    """cuda.h's CUaccessPolicyWindow, as the driver writes it into a CUstreamAttrValue."""
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


def _attr_value(num_bytes: int) -> bytes:
    window = _AccessPolicyWindow(0x7F0000001000, num_bytes, 0.6, 2, 1)  # hitProp persisting, missProp streaming
    return bytes(window).ljust(64, b"\0")


def test_the_window_size_is_read_from_where_the_driver_puts_it() -> None:
    assert device_state.window_num_bytes(_attr_value(3 << 20)) == 3 << 20
    assert device_state.window_num_bytes(bytes(64)) == 0


def test_what_is_found_is_said_and_nothing_found_says_nothing() -> None:
    assert device_state.l2_persistence_found(0, 0) == ""
    assert device_state.l2_persistence_found(None, None) == ""
    said = device_state.l2_persistence_found(16 << 20, 4096)
    assert "16777216 bytes" in said and "4096 bytes" in said
    assert "carve-out" not in device_state.l2_persistence_found(0, 4096)


def test_without_a_gpu_taking_the_l2_state_finds_nothing() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the gpu test below covers it")
    assert device_state.take_l2_persistence(0) == ""


@pytest.mark.gpu
def test_an_access_window_on_the_current_stream_is_seen_and_cleared() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    buffer = torch.zeros(1 << 20, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    lib = device_state._driver()
    assert lib is not None
    window = _AccessPolicyWindow(buffer.data_ptr(), buffer.numel() * 4, 1.0, 2, 1)
    value = (ctypes.c_ubyte * 64).from_buffer_copy(bytes(window).ljust(64, b"\0"))
    if lib.cuStreamSetAttribute(ctypes.c_void_p(stream), ctypes.c_int(1), ctypes.byref(value)) != 0 \
            or device_state.access_window_bytes(stream) is None:
        # The driver may refuse the attribute on the legacy default stream (0): missing evidence there,
        # never an error. The check itself is then proven on a stream of its own.
        assert device_state.take_l2_persistence(stream) == ""
        stream = torch.cuda.Stream().cuda_stream
        assert lib.cuStreamSetAttribute(ctypes.c_void_p(stream), ctypes.c_int(1), ctypes.byref(value)) == 0
    assert device_state.access_window_bytes(stream) == buffer.numel() * 4
    assert "access-policy window" in device_state.take_l2_persistence(stream)
    assert device_state.access_window_bytes(stream) == 0
    assert device_state.take_l2_persistence(stream) == ""


def test_free_memory_is_poisoned_block_by_block(monkeypatch) -> None:
    """One allocation of the free total would fit no block when the free memory is split (and
    reserve new memory instead): each free block gets an allocation of its own size."""
    snapshot = [
        {"device": 0, "blocks": [{"size": 200 << 20, "state": "inactive"},
                                 {"size": 4 << 20, "state": "active_allocated"},
                                 {"size": 2 << 20, "state": "inactive"}]},
        {"device": 0, "blocks": [{"size": 512, "state": "inactive"}, {"size": 256, "state": "inactive"}]},
        {"device": 1, "blocks": [{"size": 8 << 20, "state": "inactive"}]},
    ]
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda *a, **k: snapshot)
    allocated: list[int] = []
    monkeypatch.setattr(device_state, "_nan_block", lambda size, device: allocated.append(size) or size)
    device_state.poison_free_memory(torch.device("cuda", 0))
    assert allocated == [200 << 20, 2 << 20, 512]  # this device's free blocks, largest first
    device_state.poison_free_memory(torch.device("cpu"))
    assert len(allocated) == 3


@pytest.mark.gpu
def test_freed_blocks_of_different_sizes_read_nan_after_poisoning() -> None:
    device = torch.device("cuda", 0)
    big, small, kept = (torch.ones(n, device=device) for n in (3 << 20, 1 << 18, 1 << 20))
    del big, small
    device_state.poison_free_memory(device)
    assert torch.isnan(torch.empty(3 << 20, device=device)).all()
    assert torch.isnan(torch.empty(1 << 18, device=device)).all()
    del kept
