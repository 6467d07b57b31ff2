"""Framing of the private pipes between the parent and the child.

One frame per pipe and direction: an 8-byte magic, a 16-byte nonce the parent chose for this run,
an 8-byte big-endian payload length, then the payload (UTF-8 JSON). The reader is strict: wrong
magic or nonce, a short read, trailing bytes or an oversized frame are all `FrameError`, never a
partial result. The nonce makes a frame written by anything that has not read this run's request
(a stale process, a candidate guessing the format) fail to parse.
"""

from __future__ import annotations

import os
import struct

MAGIC = b"AFRAME01"
NONCE_BYTES = 16
_HEADER = struct.Struct(f">8s{NONCE_BYTES}sQ")
HEADER_BYTES = _HEADER.size
MAX_FRAME_BYTES = 256 * 1024 * 1024


class FrameError(ValueError):
    """The bytes on a private pipe are not exactly one well-formed frame."""


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


def encode_frame(payload: bytes, nonce: bytes) -> bytes:
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
    return _HEADER.pack(MAGIC, nonce, len(payload)) + payload


def decode_frame(data: bytes, nonce: bytes) -> bytes:
    """The payload of `data`, which must be exactly one frame carrying `nonce`."""
    if len(data) < HEADER_BYTES:
        raise FrameError(f"short frame: {len(data)} bytes, header needs {HEADER_BYTES}")
    magic, got_nonce, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FrameError("bad frame magic")
    if got_nonce != nonce:
        raise FrameError("frame nonce does not match this run")
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    body = data[HEADER_BYTES:]
    if len(body) < length:
        raise FrameError(f"short frame: {len(body)} of {length} payload bytes")
    if len(body) > length:
        raise FrameError(f"{len(body) - length} bytes after the frame")
    return bytes(body)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_all(fd: int, limit: int = HEADER_BYTES + MAX_FRAME_BYTES) -> bytes:
    """Everything until EOF (blocking); more than `limit` bytes is a FrameError."""
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, 1 << 16):
        total += len(chunk)
        if total > limit:
            raise FrameError(f"more than {limit} bytes on the channel")
        chunks.append(chunk)
    return b"".join(chunks)
