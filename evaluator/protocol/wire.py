"""Messages between the trusted judge and the untrusted candidate worker.

One Unix stream socket per evaluation. A message is a 4-byte big-endian length, then UTF-8 JSON;
tensors travel beside it, each in its own anonymous shared-memory file (`memfd`) whose descriptor
rides on the message's first byte (SCM_RIGHTS): large tensors are never pickled or copied through
the socket. A value is JSON with tensors replaced by `{"__tensor__": i}` (the i-th descriptor) and
tuples by `{"__tuple__": [...]}`.

The judge reads everything the worker sends as hostile data (`decode` is strict): the length is
capped, the JSON must be an object, a tensor's dtype must be one of `DTYPES`, its shape
non-negative integers with a bounded element count, its bytes must fit the shared file it names,
and every descriptor must be used exactly once. Anything else is a `WireError`.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import resource
import socket
import struct
import warnings
from typing import Any

import torch

MAX_MESSAGE_BYTES = 16 * 2**20
MAX_FDS = 250  # SCM_RIGHTS carries at most 253 descriptors on Linux
MAX_TENSOR_BYTES = 64 * 2**30
MAX_CHUNK_BYTES = 256 * 2**20
_LENGTH = struct.Struct(">I")

DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                 "complex64", "complex128")
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class WireError(ValueError):
    """What arrived is not one well-formed message: the peer is broken or hostile."""


class PeerClosed(WireError):
    """The other side closed the socket (it exited, or died)."""


class SharedFile:
    """A descriptor that rides on a message (an arena). Sent: the sender keeps its own and closes
    it when it likes. Received: a duplicate the receiver owns and must close."""

    def __init__(self, fd: int):
        self.fd = fd


# ----- values <-> JSON + tensors ---------------------------------------------------------------
def encode(value: Any, files: list[SharedFile] | None = None) -> tuple[Any, list[torch.Tensor]]:
    """(JSON-able structure, tensors in the order of their placeholders); descriptors to pass go
    to `files`."""
    tensors: list[torch.Tensor] = []

    def walk(v: Any) -> Any:
        if isinstance(v, SharedFile):
            if files is None:
                raise TypeError("a shared file cannot be encoded here")
            files.append(v)
            return {"__file__": len(files) - 1}
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return {"__tensor__": len(tensors) - 1}
        if isinstance(v, tuple):
            return {"__tuple__": [walk(x) for x in v]}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise TypeError("only str keys cross the wire")
            return {k: walk(x) for k, x in v.items()}
        if v is None or isinstance(v, bool | int | str):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"__float__": repr(v)}
        if isinstance(v, torch.dtype):
            return {"__dtype__": _NAMES.get(v, str(v))}
        raise TypeError(f"a {type(v).__name__} cannot cross the wire")

    return walk(value), tensors


def decode(structure: Any, tensors: list[torch.Tensor], files: list[SharedFile] | None = None) -> Any:
    """The value `encode` made, strictly: every tensor placeholder valid and used once."""
    used: set[int] = set()
    files = files or []
    used_files: set[int] = set()

    def walk(v: Any, depth: int) -> Any:
        if depth > 32:
            raise WireError("value nested too deeply")
        if isinstance(v, list):
            return [walk(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if set(v) == {"__tensor__"}:
                index = v["__tensor__"]
                if type(index) is not int or not 0 <= index < len(tensors) or index in used:
                    raise WireError(f"bad tensor reference {index!r}")
                used.add(index)
                return tensors[index]
            if set(v) == {"__file__"}:
                index = v["__file__"]
                if type(index) is not int or not 0 <= index < len(files) or index in used_files:
                    raise WireError(f"bad shared file reference {index!r}")
                used_files.add(index)
                return files[index]
            if set(v) == {"__tuple__"} and isinstance(v["__tuple__"], list):
                return tuple(walk(x, depth + 1) for x in v["__tuple__"])
            if set(v) == {"__float__"} and v["__float__"] in ("nan", "inf", "-inf"):
                return float(v["__float__"])
            if set(v) == {"__dtype__"} and v["__dtype__"] in DTYPES:
                return DTYPES[v["__dtype__"]]
            return {str(k): walk(x, depth + 1) for k, x in v.items()}
        if v is None or isinstance(v, bool | int | float | str):
            return v
        raise WireError(f"unexpected {type(v).__name__} in a message")

    value = walk(structure, 0)
    if len(used) != len(tensors) or len(used_files) != len(files):
        raise WireError("tensors or shared files sent but not referenced")
    return value


# ----- tensors <-> shared memory ---------------------------------------------------------------
def chunk_bytes() -> int:
    """The largest shared file this process may make: RLIMIT_FSIZE caps a memfd's size like any
    file's, so a tensor larger than that travels in several."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = MAX_CHUNK_BYTES if soft == resource.RLIM_INFINITY else min(MAX_CHUNK_BYTES, soft)
    return max(cap // 4096 * 4096, 4096)


def new_shared_file(nbytes: int, name: str = "agentforge") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, max(nbytes, 1))
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_chunks(flat: torch.Tensor) -> list[int]:
    """The bytes of a flat uint8 CPU tensor in shared files of at most `chunk_bytes()` each."""
    step, fds = chunk_bytes(), []
    try:
        for start in range(0, max(flat.numel(), 1), step):
            piece = flat[start:start + step]
            fd = new_shared_file(piece.numel())
            fds.append(fd)
            if piece.numel():
                with mmap.mmap(fd, piece.numel()) as view:
                    torch.frombuffer(view, dtype=torch.uint8, count=piece.numel()).copy_(piece)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def read_chunks(fds: list[int], out: torch.Tensor) -> None:
    """Fill a flat uint8 tensor from shared files, each of which must hold its part in full."""
    offset, total = 0, out.numel()
    for fd in fds:
        size = os.fstat(fd).st_size
        take = min(size, total - offset)
        if take <= 0 and total > 0:
            raise WireError("more shared files than the tensor's bytes need")
        if take:
            with mmap.mmap(fd, take, prot=mmap.PROT_READ) as view, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # read-only source: copied out at once
                source = torch.frombuffer(view, dtype=torch.uint8, count=take)
                out[offset:offset + take].copy_(source)
                del source
        offset += take
    if offset != total:
        raise WireError("tensor bytes do not fit the shared files that carry them")


def _tensor_to_fds(t: torch.Tensor) -> tuple[list[int], dict[str, Any]]:
    if t.dtype not in _NAMES:
        raise TypeError(f"dtype {t.dtype} cannot cross the wire")
    host = t.detach()
    device = host.device.type
    host = host.to("cpu").contiguous() if device != "cpu" or not host.is_contiguous() else host
    fds = write_chunks(host.reshape(-1).view(torch.uint8) if host.numel() else torch.empty(0, dtype=torch.uint8))
    return fds, {"dtype": _NAMES[t.dtype], "shape": list(host.shape), "device": device, "chunks": len(fds)}


def check_descriptor(meta: Any) -> tuple[torch.dtype, list[int], int]:
    """(dtype, shape, bytes) of a tensor descriptor from the other process, validated."""
    if not isinstance(meta, dict) or not {"dtype", "shape"} <= set(meta):
        raise WireError("bad tensor descriptor")
    dtype = DTYPES.get(meta["dtype"]) if isinstance(meta["dtype"], str) else None
    shape = meta["shape"]
    if dtype is None:
        raise WireError(f"dtype {meta['dtype']!r} is not accepted")
    if not isinstance(shape, list) or len(shape) > 16 or not all(type(s) is int and s >= 0 for s in shape):
        raise WireError(f"bad tensor shape {shape!r}")
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes > MAX_TENSOR_BYTES:
        raise WireError(f"tensor of {nbytes} bytes exceeds the limit")
    return dtype, shape, nbytes


def _tensor_from_fds(fds: list[int], meta: Any, device: str | None) -> torch.Tensor:
    """A private copy of the tensor in shared files (the sender may keep writing to its mapping)."""
    dtype, shape, nbytes = check_descriptor(meta)
    if set(meta) != {"dtype", "shape", "device", "chunks"}:
        raise WireError("bad tensor descriptor")
    out = torch.empty(shape, dtype=dtype)
    read_chunks(fds, out.view(-1).view(torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8))
    target = device if device is not None else ("cuda" if meta["device"] == "cuda" else "cpu")
    return out.to(target) if target != "cpu" else out


# ----- the socket ------------------------------------------------------------------------------
def send(sock: socket.socket, message: dict[str, Any]) -> None:
    shared: list[SharedFile] = []
    structure, tensors = encode(message, shared)
    fds: list[int] = []
    try:
        metas = []
        for t in tensors:
            parts, meta = _tensor_to_fds(t)
            fds += parts
            metas.append(meta)
        body = json.dumps({"m": structure, "t": metas, "f": len(shared)}, allow_nan=False).encode()
        if len(body) > MAX_MESSAGE_BYTES:
            raise WireError(f"message of {len(body)} bytes exceeds the limit")
        data = _LENGTH.pack(len(body)) + body
        passed = [*fds, *(f.fd for f in shared)]
        sent = socket.send_fds(sock, [data[:1]], passed) if passed else sock.send(data[:1])
        if sent != 1:
            raise WireError("short send")
        sock.sendall(data[1:])
    finally:
        for fd in fds:
            os.close(fd)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise PeerClosed("the peer closed the channel mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket, device: str | None = None) -> dict[str, Any]:
    """One message; tensors land on `device` (None: where the sender said they were)."""
    fds: list[int] = []
    try:
        first, fd_list, flags, _ = socket.recv_fds(sock, 1, MAX_FDS)
        fds = list(fd_list)
        if not first:
            raise PeerClosed("the peer closed the channel")
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            raise WireError("too many descriptors on one message")
        header = first + _recv_exact(sock, _LENGTH.size - 1)
        (length,) = _LENGTH.unpack(header)
        if length > MAX_MESSAGE_BYTES:
            raise WireError(f"message of {length} bytes exceeds the limit")
        try:
            envelope = json.loads(_recv_exact(sock, length))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WireError(f"message is not JSON: {exc}") from exc
        if (not isinstance(envelope, dict) or set(envelope) != {"m", "t", "f"} or not isinstance(envelope["t"], list)
                or type(envelope["f"]) is not int):
            raise WireError("message envelope malformed")
        chunks = [m.get("chunks") if isinstance(m, dict) else None for m in envelope["t"]]
        if not all(type(c) is int and c >= 1 for c in chunks) or sum(chunks) + envelope["f"] != len(fds):
            raise WireError(f"{len(envelope['t'])} tensors and {envelope['f']} files but {len(fds)} descriptors")
        count = sum(chunks)
        tensors, at = [], 0
        for meta, k in zip(envelope["t"], chunks, strict=True):
            tensors.append(_tensor_from_fds(fds[at:at + k], meta, device))
            at += k
        files = [SharedFile(os.dup(fd)) for fd in fds[count:]]
        try:
            message = decode(envelope["m"], tensors, files)
        except WireError:
            for f in files:
                os.close(f.fd)
            raise
        if not isinstance(message, dict):
            raise WireError("a message must be an object")
        return message
    finally:
        for fd in fds:
            os.close(fd)


def pending(sock: socket.socket) -> bool:
    """Whether anything (a message, or end of file) is waiting to be read, without blocking."""
    import select

    ready, _, _ = select.select([sock], [], [], 0)
    return bool(ready)


def pair() -> tuple[socket.socket, socket.socket]:
    """(judge end, worker end): a connected pair of Unix stream sockets, not inheritable."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


