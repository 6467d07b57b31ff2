"""The judge<->worker wire: values and tensors round-trip through shared memory, and whatever a
hostile peer writes by hand is a WireError, never a value (real sockets, real memfds)."""

from __future__ import annotations

import json
import mmap
import os
import socket
import struct

import pytest
import torch
from agentforge.evaluator.protocol import wire
from agentforge.evaluator.protocol.arena import Arena


def raw_send(sock: socket.socket, envelope: object, fds: list[int] = ()) -> None:
    body = json.dumps(envelope).encode()
    data = struct.pack(">I", len(body)) + body
    if fds:
        socket.send_fds(sock, [data[:1]], list(fds))
        sock.sendall(data[1:])
    else:
        sock.sendall(data)


def desc(dtype: str, shape: list[int]) -> dict:
    return {"dtype": dtype, "shape": shape, "device": "cpu", "chunks": 1}


def memfd_with(nbytes: int) -> int:
    fd = os.memfd_create("test")
    os.ftruncate(fd, nbytes)
    return fd


def test_values_and_tensors_round_trip() -> None:
    a, b = wire.pair()
    value = {"id": 3, "x": [torch.arange(6, dtype=torch.float32).view(2, 3), (1, 2.5, None, "s")],
             "half": torch.ones(4, dtype=torch.bfloat16), "empty": torch.empty(0, 5), "nan": float("nan"),
             "dtype": torch.float16, "flag": True}
    wire.send(a, value)
    got = wire.receive(b)
    assert torch.equal(got["x"][0], value["x"][0]) and got["x"][1] == (1, 2.5, None, "s")
    assert got["half"].dtype == torch.bfloat16 and got["empty"].shape == (0, 5)
    assert got["nan"] != got["nan"] and got["dtype"] is torch.float16 and got["flag"] is True


def test_a_received_tensor_is_a_private_copy() -> None:
    """The sender keeps its shared file: writing to it after the send must not change what the
    judge received."""
    a, b = wire.pair()
    fd = memfd_with(16)
    with mmap.mmap(fd, 16) as view:
        view[:] = struct.pack("<4f", 1, 2, 3, 4)
        raw_send(a, {"m": {"x": {"__tensor__": 0}}, "t": [desc("float32", [4])],
                     "f": 0}, [fd])
        got = wire.receive(b)["x"]
        view[:] = struct.pack("<4f", 9, 9, 9, 9)
    assert got.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("envelope,nbytes,why", [
    ({"m": {"__tensor__": 0}, "t": [desc("object", [4])], "f": 0}, 16, "dtype"),
    ({"m": {"__tensor__": 0}, "t": [desc("float32", [1 << 20])], "f": 0}, 16, "fit"),
    ({"m": {"__tensor__": 0}, "t": [desc("float32", [-4])], "f": 0}, 16, "shape"),
    ({"m": {"__tensor__": 1}, "t": [desc("float32", [4])], "f": 0}, 16, "reference"),
    ({"m": [], "t": [desc("float32", [4])], "f": 0}, 16, "referenced"),
    ({"m": {}, "t": [], "f": 0}, 16, "descriptors"),
    ({"m": 5, "t": [], "f": 0}, None, "object"),
    ({"m": {}, "t": []}, None, "envelope"),
])
def test_hostile_messages_are_refused(envelope: dict, nbytes: int | None, why: str) -> None:
    a, b = wire.pair()
    fds = [memfd_with(nbytes)] if nbytes is not None else []
    raw_send(a, envelope, fds)
    with pytest.raises(wire.WireError, match=why):
        wire.receive(b)


def test_oversized_and_garbage_frames_are_refused() -> None:
    a, b = wire.pair()
    a.sendall(struct.pack(">I", wire.MAX_MESSAGE_BYTES + 1))
    with pytest.raises(wire.WireError, match="exceeds"):
        wire.receive(b)
    a, b = wire.pair()
    a.sendall(struct.pack(">I", 3) + b"\xff\xfe{")
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.receive(b)
    a, b = wire.pair()
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.receive(b)


def test_arena_peer_mapping_is_read_only() -> None:
    arena = Arena.create([torch.zeros(8), torch.zeros(2, 3, dtype=torch.int64)])
    arena.write([torch.arange(8.0), torch.ones(2, 3, dtype=torch.int64)])
    shared = arena.share(writable=False)
    peer = Arena.attach(shared, arena.slots, writable=False)
    for f in shared:
        os.close(f.fd)
    got = peer.read()
    assert got[0].tolist() == list(range(8)) and got[1].sum().item() == 6
    arena.write([torch.full((8,), 5.0), torch.zeros(2, 3, dtype=torch.int64)])
    assert peer.read()[0].tolist() == [5.0] * 8  # the owner's writes show through
    with pytest.raises(PermissionError):
        mmap.mmap(peer.files[0][0], 32, prot=mmap.PROT_READ | mmap.PROT_WRITE)  # no writable mapping
    with pytest.raises(wire.WireError, match="out of bounds"):
        Arena.attach(arena.share(writable=False)[:1], [{"dtype": "float32", "shape": [1 << 20], "chunks": 1}],
                     writable=False)


def test_a_tensor_larger_than_the_file_size_limit_travels_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MAX_CHUNK_BYTES", 4096)
    a, b = wire.pair()
    big = torch.randn(5000)  # 20000 bytes: five shared files
    wire.send(a, {"x": big})
    assert torch.equal(wire.receive(b)["x"], big)
    arena = Arena.create([big])
    assert arena.slots[0]["chunks"] == 5
    arena.write([big])
    assert torch.equal(arena.read()[0], big)


def test_the_worker_reads_the_arena_into_its_own_buffers_and_compares_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_into` copies once, across chunk boundaries, and refuses a buffer the candidate reshaped;
    `matches` compares bits: a NaN sent and kept is no change, -0.0 over 0.0 is one."""
    monkeypatch.setattr(wire, "MAX_CHUNK_BYTES", 4096)
    sent = torch.randn(3000)  # three shared files, the last one short
    sent[7], sent[8] = float("nan"), 0.0
    arena = Arena.create([sent, torch.zeros(3, dtype=torch.int8)])
    arena.write([sent, torch.tensor([1, 2, 3], dtype=torch.int8)])
    shared = arena.share(writable=False)
    peer = Arena.attach(shared, arena.slots, writable=False)
    for f in shared:
        os.close(f.fd)
    mine = [torch.empty(3000), torch.empty(3, dtype=torch.int8)]
    assert peer.read_into(mine)
    assert torch.equal(mine[0].view(torch.int32), sent.view(torch.int32)) and mine[1].tolist() == [1, 2, 3]
    assert peer.matches(0, mine[0]) and peer.matches(1, mine[1])  # the NaN is kept: no change
    mine[0][8] = -0.0
    assert not peer.matches(0, mine[0])
    mine[0][8] = 0.0
    mine[0][2999] += 1  # the last element of the short last chunk
    assert not peer.matches(0, mine[0])
    assert not peer.matches(1, torch.tensor([1, 2], dtype=torch.int8))  # reshaped
    assert not peer.read_into([torch.empty(6000)[::2], mine[1]])  # the right shape, not contiguous
