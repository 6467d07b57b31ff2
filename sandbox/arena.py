"""Tensors in shared-memory files made once and reused, for the many round trips of a timing loop
and for outputs the worker hands back.

Sending each repetition's inputs and outputs in fresh shared files costs a page fault per page
(about 8 ms per 4 MB on the 2-core machine), which would swamp the calls being timed. The judge
makes every arena: one for the timing inputs, which the worker maps read-only (a descriptor
reopened `O_RDONLY` through /proc/self/fd cannot be mapped for writing), and one for the outputs
it expects (shaped like the reference's), which the worker maps writable and fills. Each tensor
lives in one or more shared files of at most `wire.chunk_bytes()` (RLIMIT_FSIZE caps a memfd's
size like any file's); each side keeps one contiguous tensor per slot and copies through.

`attach` validates a layout and descriptors that came from the other process: whitelisted dtypes,
bounded shapes and counts, and files that hold exactly the bytes their slot needs.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import torch
from agentforge.sandbox import wire

MAX_SLOTS = 64


class Arena:
    def __init__(self, files: list[list[int]], slots: list[dict[str, Any]], writable: bool):
        self.files, self.slots, self.writable = files, slots, writable
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self.maps = [[mmap.mmap(fd, os.fstat(fd).st_size, prot=prot) for fd in chunk_fds] for chunk_fds in files]
        self.tensors = [torch.empty(s["shape"], dtype=wire.DTYPES[s["dtype"]]) for s in slots]

    @classmethod
    def create(cls, like: list[torch.Tensor]) -> Arena:
        """An arena with a slot shaped like each tensor, made and owned here."""
        files, slots = [], []
        step = wire.chunk_bytes()
        try:
            for t in like:
                nbytes = t.numel() * t.element_size()
                files.append([wire.new_shared_file(min(step, nbytes - start))
                              for start in range(0, max(nbytes, 1), step)])
                slots.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                              "chunks": len(files[-1])})
        except BaseException:
            for fds in files:
                for fd in fds:
                    os.close(fd)
            raise
        return cls(files, slots, writable=True)

    def fits(self, tensors: list[torch.Tensor]) -> bool:
        return len(tensors) == len(self.tensors) and all(
            t.dtype == a.dtype and tuple(t.shape) == tuple(a.shape) for t, a in zip(tensors, self.tensors, strict=True))

    def share(self, writable: bool) -> list[wire.SharedFile]:
        """Descriptors for the peer (the caller closes them once sent): read-only ones cannot be
        mapped for writing."""
        flags = os.O_RDWR if writable else os.O_RDONLY
        return [wire.SharedFile(os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC))
                for fds in self.files for fd in fds]

    @classmethod
    def attach(cls, shared: Any, slots: Any, writable: bool) -> Arena:
        """Map the other process's arena; `shared` and `slots` are validated as hostile data. The
        descriptors in `shared` stay the caller's to close."""
        if not isinstance(slots, list) or len(slots) > MAX_SLOTS or not isinstance(shared, list):
            raise wire.WireError("bad arena layout")
        if not all(isinstance(f, wire.SharedFile) for f in shared):
            raise wire.WireError("bad arena descriptors")
        files, at = [], 0
        for slot in slots:
            _, _, nbytes = wire.check_descriptor(slot)
            count = slot.get("chunks")
            if set(slot) != {"dtype", "shape", "chunks"} or type(count) is not int or not 1 <= count <= 64:
                raise wire.WireError("bad arena slot")
            fds = [f.fd for f in shared[at:at + count]]
            at += count
            if len(fds) != count or sum(os.fstat(fd).st_size for fd in fds) < nbytes:
                raise wire.WireError("arena slot out of bounds")
            files.append([os.dup(fd) for fd in fds])
        if at != len(shared):
            raise wire.WireError("more arena descriptors than slots")
        return cls(files, slots, writable)

    def write(self, tensors: list[torch.Tensor]) -> None:
        """Copy `tensors` (same shapes and dtypes as the slots; any device) into the shared files."""
        for maps, t in zip(self.maps, tensors, strict=True):
            flat = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8) if t.numel() else None
            offset = 0
            for view in maps:
                if flat is None:
                    break
                take = min(len(view), flat.numel() - offset)
                if take > 0:
                    torch.frombuffer(view, dtype=torch.uint8, count=take).copy_(flat[offset:offset + take])
                offset += take

    def read(self) -> list[torch.Tensor]:
        """The slots' current contents, copied into this side's own tensors (reused call after call)."""
        for maps, out in zip(self.maps, self.tensors, strict=True):
            if not out.numel():
                continue
            flat = out.reshape(-1).view(torch.uint8)
            offset = 0
            for view in maps:
                take = min(len(view), flat.numel() - offset)
                if take > 0:
                    flat[offset:offset + take].copy_(_readable(view, take))
                offset += take
        return self.tensors

    def close(self) -> None:
        for maps in self.maps:
            for view in maps:
                try:
                    view.close()
                except BufferError:
                    pass  # a view is still alive; the mapping goes with the process
        for fds in self.files:
            for fd in fds:
                os.close(fd)
        self.maps, self.files = [], []


def _readable(view: mmap.mmap, count: int) -> torch.Tensor:
    import warnings

    with warnings.catch_warnings():  # a read-only mapping: torch warns that the tensor is not writable
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(view, dtype=torch.uint8, count=count)
