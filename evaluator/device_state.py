"""The device the child evaluates on: its identity, versions, and the state the harness resets.

CUDA-only pieces (poisoning the caching allocator's free blocks, the persisting-L2 limit) are
no-ops on the CPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import os
import platform
import socket

import torch
from agentforge.evaluator.result import DeviceInfo

_CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit in cuda.h
_CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1  # CUstreamAttrID (= CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)
# CUstreamAttrValue is a union of at most 64 bytes; its CUaccessPolicyWindow starts with
# `void* base_ptr; size_t num_bytes; float hitRatio; ...`.
_ATTR_VALUE_BYTES = 64
_WINDOW_NUM_BYTES_OFFSET = 8


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    return device


def unavailable_reason(device: torch.device, dev: str = "/dev") -> str | None:
    """Why a CUDA job cannot run on this machine (no GPU visible to torch, or fewer than its
    index), in words a user can act on; None when it can, and for CPU jobs. Where the driver's
    control node is there but CUDA does not start, the sandbox's confinement may be what hides the
    card (as a read-only /proc did on an H200), and the reason says so."""
    if device.type != "cuda":
        return None
    index = device.index or 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index < count:
        return None
    if count:
        return (f"the job asks for {device} but torch sees {count} CUDA device(s) here "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    build = (f"torch {torch.__version__} is a CUDA {torch.version.cuda} build, but no NVIDIA GPU or driver is "
             "visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)" if torch.version.cuda else
             f"torch {torch.__version__} is a CPU-only build")
    if torch.version.cuda and os.path.exists(os.path.join(dev, "nvidiactl")):
        return (f"the job asks for {device} but CUDA does not start in this process although {dev}/nvidiactl is "
                f"there (torch {torch.__version__}, CUDA {torch.version.cuda}): the sandbox's confinement may hide "
                "the GPU. `agentforge doctor` runs cuInit under it (its `gpu in sandbox` line); `--isolation none` "
                "tells whether it is the confinement")
    return (f"the job asks for {device} but this machine has no CUDA GPU: {build}. Without a GPU, ask for "
            "device cpu or auto: CUDA candidates then run in the CPU emulation or get the compile-only verdict")


def device_info(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo(kind="cuda", name=props.name, driver=_driver_version(),
                          capability=f"{props.major}.{props.minor}", count=torch.cuda.device_count())
    return DeviceInfo(kind="cpu", name=_cpu_name(), count=os.cpu_count() or 1)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    with contextlib.suppress(ImportError):
        import numpy

        found["numpy"] = numpy.__version__
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        found["cudnn"] = str(torch.backends.cudnn.version())
    # By distribution metadata, not `import triton`: importing it here would fix its mode before a
    # later job could switch the interpreter on (see triton_interpret.enable).
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        found["triton"] = importlib.metadata.version("triton")
    return found


def host() -> str:
    return socket.gethostname()


def poison_free_memory(device: torch.device) -> None:
    """Fill the caching allocator's free blocks with NaN, so that a candidate reading memory it
    did not write (a freed reference output, say) reads NaN, not an answer.

    Block by block, largest first, each allocation the size of one free block (the allocator's
    best fit then hands out that block or one of the same size): one allocation of the free total
    fits no block when the free memory is split, and would reserve new memory instead."""
    if device.type != "cuda":
        return
    chunks = []
    with contextlib.suppress(torch.cuda.OutOfMemoryError):
        for size in free_block_sizes(device):
            chunks.append(_nan_block(size, device))
    del chunks


def free_block_sizes(device: torch.device) -> list[int]:
    """The sizes of the caching allocator's free (inactive) blocks on `device`, largest first."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    sizes = [int(block["size"]) for segment in torch.cuda.memory_snapshot() if segment.get("device") == index
             for block in segment.get("blocks", []) if block.get("state") == "inactive" and block.get("size", 0) >= 512]
    return sorted(sizes, reverse=True)


def _nan_block(size: int, device: torch.device) -> torch.Tensor:
    return torch.full((size // 4,), float("nan"), dtype=torch.float32, device=device)


def _driver() -> ctypes.CDLL | None:
    """The CUDA driver library (libcuda.so.1): installed with the driver, on the loader's path
    whatever the CUDA runtime's layout (a CUDA 12 or 13 wheel, a toolkit), and it is what the
    runtime itself calls."""
    for name in ("libcuda.so.1", "libcuda.so"):
        with contextlib.suppress(OSError):
            return ctypes.CDLL(name)
    return None


def _current_context_driver() -> ctypes.CDLL | None:
    """The driver, with torch's primary context current on this thread (None without a GPU)."""
    if not torch.cuda.is_available():
        return None
    lib = _driver()
    if lib is None:
        return None
    torch.cuda.synchronize()  # a runtime call: makes the device's primary context current here
    return lib


def persisting_l2_bytes() -> int | None:
    """The persisting-L2 carve-out currently set (CU_LIMIT_PERSISTING_L2_CACHE_SIZE, read with
    cuCtxGetLimit), or None when no GPU or driver answers."""
    lib = _current_context_driver()
    if lib is None:
        return None
    value = ctypes.c_size_t(0)
    if lib.cuCtxGetLimit(ctypes.byref(value), ctypes.c_int(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE)) != 0:
        return None
    return int(value.value)


def reset_persisting_l2() -> bool:
    """Set the carve-out back to 0 and flush persisting lines to normal; True when the driver
    accepted both (False without a GPU)."""
    lib = _current_context_driver()
    if lib is None:
        return False
    limit = lib.cuCtxSetLimit(ctypes.c_int(_CU_LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(0))
    reset = lib.cuCtxResetPersistingL2Cache()
    return limit == 0 and reset == 0


def access_window_bytes(stream: int) -> int | None:
    """The bytes of the persisting access-policy window set on `stream` (a CUstream handle, 0 for
    the legacy default stream), or None when no GPU or driver answers."""
    lib = _current_context_driver()
    if lib is None:
        return None
    value = (ctypes.c_ubyte * _ATTR_VALUE_BYTES)()
    if lib.cuStreamGetAttribute(ctypes.c_void_p(stream), ctypes.c_int(_CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW),
                                ctypes.byref(value)) != 0:
        return None
    return window_num_bytes(bytes(value))


def window_num_bytes(attr_value: bytes) -> int:
    """`num_bytes` of the CUaccessPolicyWindow in a CUstreamAttrValue's raw bytes."""
    return int.from_bytes(attr_value[_WINDOW_NUM_BYTES_OFFSET:_WINDOW_NUM_BYTES_OFFSET + 8], "little")


def clear_access_window(stream: int) -> bool:
    """Remove `stream`'s access-policy window (all zero: no window); True when the driver accepted."""
    lib = _current_context_driver()
    if lib is None:
        return False
    value = (ctypes.c_ubyte * _ATTR_VALUE_BYTES)()
    return lib.cuStreamSetAttribute(ctypes.c_void_p(stream), ctypes.c_int(_CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW),
                                    ctypes.byref(value)) == 0


def l2_persistence_found(carve_out: int | None, window: int | None) -> str:
    """What a persisting-L2 reading shows, in words ('' when nothing is set or nothing answered)."""
    found = []
    if carve_out:
        found.append(f"a persisting-L2 carve-out of {carve_out} bytes (cudaLimitPersistingL2CacheSize)")
    if window:
        found.append(f"an access-policy window of {window} bytes on the current stream")
    return " and ".join(found)


def take_l2_persistence(stream: int) -> str:
    """Read the persisting-L2 state a candidate may have set (the context's carve-out, the stream's
    access window), put it back to none, and say what was found ('' when nothing, or no GPU).
    The reset runs whatever was read: a candidate that set the carve-out back to 0 before its call
    returned may still have lines marked persisting, and the reset makes them normal, so the next
    cache flush evicts them."""
    found = l2_persistence_found(persisting_l2_bytes(), access_window_bytes(stream))
    reset_persisting_l2()
    if found:
        clear_access_window(stream)
    return found


def _driver_version() -> str | None:
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as fh:
        first = fh.readline()
        for token in first.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    return None


def _cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"
