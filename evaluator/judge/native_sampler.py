"""Where the candidate worker's CPU time goes, seen from outside its process by the judge.

The operator observer and the tamper snapshot live in the worker, so native code that owns that
process can stop or blind them and call torch (`at::matmul`), or a BLAS it found in memory with no
loader call to audit. What it cannot stop is the kernel's own sampling of it, opened by another
process. `NativeSampler.open` is called by the judge the moment it has forked the worker (one thread,
no candidate code, nothing secret read yet): one `perf_event_open` per CPU on the worker's task-clock,
user-space instruction pointers only, inherited by every thread and process the worker ever starts.
The kernel writes a sample (instruction pointer, pid, thread, CLOCK_MONOTONIC time) every
`PERIOD_US` of CPU each worker thread runs, into ring buffers only the judge holds; the worker is
never stopped and cannot close, pause or redirect them (they are the judge's descriptors). The judge
marks each request it sends (`on_request`), so each sample falls in a phase of the protocol: the
candidate's correctness calls, its timed calls, the null calls of the judge's clock, the rest. Each
pointer is mapped to the file it lies in (`/proc/PID/maps`) and counted by kind (`classify`): the
candidate's own builds, torch's libraries, BLAS/LAPACK/oneDNN/MKL (numpy's bundled OpenBLAS included),
anonymous executable memory (JIT code: oneDNN, MKL), the interpreter and its extension modules, the
system libraries. `integrity.native_sampling_findings` turns the counts into flags.

Why not ptrace: interrupting each thread to read its registers stopped the worker for as long as the
tracer took to be scheduled again; on this 2-core VM at load 3 a tracee slowed 1.7x at one sample a
millisecond. The kernel's sample is a timer interrupt in the sampled thread and needs no tracer to wake
(5-13 % of a BLAS loop at one per 250 us on this VM); the judge opens the same event, without a buffer,
on itself from the first timed call on, so that its baselines pay alike. Not used on CUDA devices.

Bounds: a statistical view (one sample per `PERIOD_US` of a running thread's CPU), so work well under
that per call is seen only over many calls. Where the kernel refuses (`perf_event_paranoid` above 2, a
seccomp profile such as Docker's default, a locked-memory limit), the report says `available: false`
and why, and nothing is flagged. A worker that makes itself not dumpable after the sampler opened
still gets sampled, but its memory map can no longer be read to name the code: `observer_blocked`.
Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import mmap
import os
import platform
import struct
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from agentforge.evaluator.judge import library_identity

# Phases of the judge's protocol.
IDLE, OTHER, CALL, TIMED, NULL, FLUSH = range(6)
PHASES = ("idle", "other", "call", "timed", "null", "flush")
KINDS = ("own", "torch", "blas", "jit", "python", "system", "other")

REREAD_S = 0.5  # the worker's map is read again at most this often (at a drain)
PERIOD_US = 250  # one sample per 250 us of a thread's CPU time
DATA_PAGES = 16  # ring buffer per CPU (a power of two): 64 KiB, about 2,000 samples
_SYSCALL = {"x86_64": 298, "aarch64": 241}  # perf_event_open
_PERF_TYPE_SOFTWARE, _TASK_CLOCK = 1, 1
_SAMPLE_IP, _SAMPLE_TID, _SAMPLE_TIME = 1, 2, 4
_INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV, _USE_CLOCKID = 1 << 1, 1 << 5, 1 << 6, 1 << 25
_RECORD_LOST, _RECORD_SAMPLE = 2, 9
_FD_CLOEXEC = 8
_IOC_ENABLE = 0x2400
_CLOCK_MONOTONIC = 1

_BLAS = ("blas", "lapack", "mkl", "dnnl", "onednn", "libgfortran", "libquadmath", "libflame", "libblis", "armpl")
_TORCH = ("libtorch", "libc10", "libshm", "libcaffe2", "/torch/lib/")
_PYTHON = ("libpython", "/bin/python", ".cpython-", "/lib-dynload/", "site-packages/")
_SYSTEM = ("/libc.", "/libc-", "/libm.", "/libm-", "libstdc++", "libgcc_s", "/ld-linux", "libpthread", "libgomp",
           "libiomp", "libdl.", "librt.", "[vdso]", "[vsyscall]", "libz.", "libcrypto", "libssl", "libffi")


def classify(path: str, own_roots: tuple[str, ...]) -> str:
    """The kind of code at a mapped file (`path` as /proc/PID/maps names it; "" for anonymous)."""
    if not path or path.startswith("[anon") or path in ("[heap]", "[stack]"):
        return "jit"
    if any(path.startswith(root.rstrip("/") + "/") for root in own_roots if root):
        return "own"
    lower = path.lower()
    if any(part in lower.rsplit("/", 1)[-1] for part in _BLAS):
        return "blas"
    if any(part in lower for part in _TORCH):
        return "torch"
    if any(part in lower for part in _SYSTEM):
        return "system"
    if any(part in lower for part in _PYTHON):
        return "python"
    return "other"


def _dumpable(pid: int) -> bool:
    """Whether process `pid` is dumpable: the kernel gives a process that is not the files in its /proc folder
    to root, whatever its own uid (read outside it; a process gone counts as dumpable)."""
    try:
        owner = os.stat(f"/proc/{pid}/maps").st_uid
        with open(f"/proc/{pid}/status") as f:
            effective = next(int(line.split()[2]) for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return True
    return owner == effective


@dataclass
class _Map:
    """The executable mappings of a process: sorted starts, ends and paths."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, pid: int) -> _Map | None:
        """None where the map may not be read (the process made itself not dumpable); an empty map
        where the process is gone."""
        try:
            if not _dumpable(pid):  # a judge of another uid reads it anyway (CAP_SYS_PTRACE): still refused
                return None
            with open(f"/proc/{pid}/maps") as f:
                lines = f.read().splitlines()
        except PermissionError:
            return None
        except OSError:
            return cls()
        rows = []
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 5 or "x" not in parts[1]:
                continue
            low, _, high = parts[0].partition("-")
            rows.append((int(low, 16), int(high, 16), parts[5].strip() if len(parts) == 6 else ""))
        rows.sort()
        return cls([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    def find(self, address: int) -> str | None:
        i = bisect_right(self.starts, address) - 1
        return self.paths[i] if i >= 0 and address < self.ends[i] else None


def _attr(period_us: int, disabled: bool = False) -> ctypes.Array[ctypes.c_char]:
    """A `perf_event_attr` (version 5 layout, 112 bytes): task-clock, user-space samples of
    ip/pid/tid/time on CLOCK_MONOTONIC, inherited by new threads and processes."""
    raw = bytearray(112)
    struct.pack_into("<IIQQQ", raw, 0, _PERF_TYPE_SOFTWARE, len(raw), _TASK_CLOCK, period_us * 1000,
                     _SAMPLE_IP | _SAMPLE_TID | _SAMPLE_TIME)
    struct.pack_into("<Q", raw, 40, _INHERIT | _EXCLUDE_KERNEL | _EXCLUDE_HV | _USE_CLOCKID | int(disabled))
    struct.pack_into("<i", raw, 92, _CLOCK_MONOTONIC)
    return (ctypes.c_char * len(raw)).from_buffer(raw)


def _online_cpus() -> list[int]:
    try:
        with open("/sys/devices/system/cpu/online") as f:
            spans = f.read().strip().split(",")
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for span in spans:
        low, _, high = span.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


class _Ring:
    """One CPU's ring buffer: the kernel writes at data_head, the judge reads up to it and moves data_tail."""

    def __init__(self, fd: int):
        self.fd = fd
        self.map = mmap.mmap(fd, (1 + DATA_PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.offset, self.size = mmap.PAGESIZE, DATA_PAGES * mmap.PAGESIZE

    def pending(self) -> int:
        head, tail = struct.unpack_from("<QQ", self.map, 1024)
        return head - tail

    def take(self) -> bytes:
        head, tail = struct.unpack_from("<QQ", self.map, 1024)
        if head == tail:
            return b""
        start, end = self.offset + tail % self.size, self.offset + head % self.size
        if head - tail >= self.size or end <= start:  # wrapped (or full)
            data = self.map[start:self.offset + self.size] + self.map[self.offset:end]
        else:
            data = self.map[start:end]
        struct.pack_into("<Q", self.map, 1032, head)
        return data

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class NativeSampler:
    """The judge's sampler of one worker: `open` right after the fork, `set_own_roots` once the build
    cache is known, `on_request` around every request, `finish` for the report."""

    def __init__(self, pid: int, rings: list[_Ring], why: str = ""):
        self.pid, self.rings, self.why = pid, rings, why
        self.own_roots: tuple[str, ...] = ()
        self.marks: list[tuple[int, int]] = [(0, IDLE)]  # (CLOCK_MONOTONIC ns, phase from then on)
        self.requests = [0] * len(PHASES)
        self.counts = [dict.fromkeys(KINDS, 0) for _ in PHASES]
        self.files: dict[str, int] = {}
        self.lost = 0
        self.unreadable = 0
        self.maps: dict[int, _Map | None] = {}
        self.reread: set[int] = set()  # processes whose map was read in this drain
        self.worker_map_at = 0.0
        self.denied = 0  # reads of the worker's map refused (it made itself not dumpable)
        self.denied_at: list[str] = []
        self.report: dict[str, Any] | None = None
        self.self_fd = -1  # the judge's own sampling event (for equal cost on the baselines), or -errno
        self.self_enabled = False
        # Files that would count as the candidate's own (or as nothing known), read once for what they
        # hold: (kind, what it is) where that is not what their name or place says (`library_identity`).
        self.identified: dict[str, tuple[str, str] | None] = {}
        # Where the judge builds the candidate's code (`judge_builds.JudgeBuilds`): a file in its store
        # counts as the candidate's own only when its content hashes to an artifact the judge handed out.
        self.judge_builds: Any = None
        self.own_checked: dict[str, bool] = {}
        self.other_files: dict[str, int] = {}  # samples of the candidate's calls in code of no known kind
        self.known = library_identity.KnownLibraries()

    @property
    def available(self) -> bool:
        return bool(self.rings)

    @classmethod
    def open(cls, pid: int, period_us: int = PERIOD_US) -> NativeSampler:
        """Samplers on every CPU for process `pid` and everything it will start; never raises (an
        unavailable sampler says why)."""
        number = _SYSCALL.get(platform.machine())
        if platform.system() != "Linux" or number is None:
            return cls(pid, [], f"no perf events on {platform.system()} {platform.machine()}")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def event(target: int, cpu: int, disabled: bool = False) -> int:
            fd = libc.syscall(ctypes.c_long(number), _attr(period_us, disabled), ctypes.c_int(target),
                              ctypes.c_int(cpu), ctypes.c_int(-1), ctypes.c_ulong(_FD_CLOEXEC))
            return int(fd) if fd >= 0 else -ctypes.get_errno()

        rings: list[_Ring] = []
        for cpu in _online_cpus():
            fd = event(pid, cpu)
            if fd < 0:
                for ring in rings:
                    ring.close()
                return cls(pid, [], f"perf_event_open refused on cpu {cpu}: {os.strerror(-fd)}")
            try:
                rings.append(_Ring(fd))
            except OSError as exc:
                os.close(fd)
                for ring in rings:
                    ring.close()
                return cls(pid, [], f"perf ring buffer not mapped: {exc.strerror} (locked-memory limit)")
        sampler = cls(pid, rings)
        # The same sampling interrupts in the judge itself (its thread and those it starts later), where
        # the baselines run, from the first timed call on; their samples are dropped (no buffer), their
        # cost is the same.
        sampler.self_fd = event(0, -1, disabled=True)
        return sampler

    def set_own_roots(self, roots: tuple[str, ...]) -> None:
        """Where the candidate's own builds live (the build cache). Called once the worker is set up
        (before any candidate code): its memory map must be readable now, or nothing can be named."""
        self.own_roots = tuple(r for r in roots if r)
        if not self.rings:
            return
        self.maps[self.pid] = _Map.read(self.pid)
        self.worker_map_at = time.monotonic()
        if self.maps[self.pid] is None:
            self.why = "the worker's memory map is not readable after its setup (not dumpable)"
            self.close()

    def set_judge_builds(self, builds: Any) -> None:
        """The candidate's own code is what `builds` (a `judge_builds.JudgeBuilds`) built: its store is
        the one own root, and each file there is held to the hashes of what the judge handed out."""
        self.judge_builds = builds
        self.set_own_roots((str(builds.store),))

    def stop(self, why: str) -> None:
        """No sampling for this job (closing the judge's events ends it in every worker thread)."""
        self.why = why
        self.close()

    def on_request(self, op: str | None, key: str | None = None) -> None:
        """The judge is about to send request `op` (None: its reply has come). Drains the buffers only
        outside the judge's clocks (before a flush or an untimed request) or when they near full."""
        if not self.rings or self.report is not None:
            return
        try:
            self._mark(op, key)
        except Exception as exc:  # the sampler's own failure never reaches the judge's protocol
            self.why = f"sampler failed: {type(exc).__name__}: {str(exc)[:200]}"
            self.close()

    def _mark(self, op: str | None, key: str | None) -> None:
        phase = _phase(op, key)
        if op is not None:
            self.requests[phase] += 1
        if phase in (TIMED, NULL) and not self.self_enabled and self.self_fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.self_fd, _IOC_ENABLE, 0)
                self.self_enabled = True
        self.marks.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC), phase))
        if phase in (FLUSH, OTHER, CALL) or any(r.pending() > r.size // 2 for r in self.rings):
            self._drain()

    def _drain(self) -> None:
        self.reread.clear()
        now = time.monotonic()
        # Libraries loaded since, and a map that became unreadable (only once the worker is set up: it is
        # born not dumpable, as the judge it was forked from, until its setup makes it dumpable).
        if self.worker_map_at and now - self.worker_map_at > REREAD_S:
            self.worker_map_at = now
            fresh = _Map.read(self.pid)
            if fresh is None:
                self.denied += 1
                if len(self.denied_at) < 3:
                    self.denied_at.append(f"{PHASES[self.marks[-1][1]]} {_state(self.pid)}")
            elif fresh.starts:
                self.maps[self.pid] = fresh
                self.reread.add(self.pid)
        for ring in self.rings:
            data = ring.take()
            pos = 0
            while pos + 8 <= len(data):
                kind, _, size = struct.unpack_from("<IHH", data, pos)
                if size < 8:
                    break
                if kind == _RECORD_SAMPLE and size >= 32:
                    ip, pid, _tid, when = struct.unpack_from("<QIIQ", data, pos + 8)
                    self._count(ip, pid, when)
                elif kind == _RECORD_LOST and size >= 24:
                    self.lost += struct.unpack_from("<Q", data, pos + 16)[0]
                pos += size

    def _count(self, ip: int, pid: int, when: int) -> None:
        phase = self.marks[bisect_right(self.marks, (when, len(PHASES))) - 1][1]
        path = self._path(pid, ip)
        if path is None:
            if pid == self.pid:
                self.unreadable += 1
            return
        kind = classify(path, self.own_roots)
        if kind == "own" and self.judge_builds is not None and not self._judge_built(pid, path):
            kind = "other"
        if kind in ("own", "other") and phase in (CALL, TIMED):
            kind = self._by_content(pid, path, kind)
        self.counts[phase][kind] += 1
        if kind == "other" and phase in (CALL, TIMED):
            self.other_files[path] = self.other_files.get(path, 0) + 1
        if phase in (CALL, TIMED) and (path in self.files or len(self.files) < 100):
            self.files[path] = self.files.get(path, 0) + 1

    def _by_content(self, pid: int, path: str, kind: str) -> str:
        """The kind of `path` by its content, read through the worker's own view of its files
        (`/proc/PID/root`: it has a /tmp of its own) where the judge may, else by the path."""
        if path not in self.identified:
            seen = f"/proc/{pid}/root{path}"
            self.identified[path] = library_identity.identify(seen if os.path.exists(seen) else path, self.known)
        found = self.identified[path]
        return found[0] if found is not None else kind

    def _judge_built(self, pid: int, path: str) -> bool:
        """Whether the file at `path` (read through the worker's view of its files) is, byte for byte,
        an artifact the judge built and handed out; read once per path."""
        if path not in self.own_checked:
            seen = f"/proc/{pid}/root{path}"
            try:
                with open(seen if os.path.exists(seen) else path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError:
                digest = ""
            self.own_checked[path] = digest in self.judge_builds.artifacts
        return self.own_checked[path]

    def _path(self, pid: int, ip: int) -> str | None:
        """The file at `ip` in process `pid` ("" for anonymous memory or a process gone), or None where
        its map may not be read. The map is read again (once a drain) when an address is in no mapping
        it knows (a library loaded since); a map of a process that has ended keeps the last reading."""
        known = self.maps.get(pid)
        found = known.find(ip) if known is not None else None
        if found is None and pid not in self.reread:
            self.reread.add(pid)
            fresh = _Map.read(pid)
            if fresh is None or fresh.starts or known is None:
                known = self.maps[pid] = fresh
            found = known.find(ip) if known is not None else None
        if known is None:
            return None
        return found if found is not None else ""

    def finish(self) -> dict[str, Any]:
        """Drain, close, and report (once; later calls return the same report)."""
        if self.report is not None:
            return self.report
        if self.rings:
            try:
                self._drain()
            except Exception as exc:
                self.why = f"sampler failed: {type(exc).__name__}: {str(exc)[:200]}"
                self.close()
        if not self.rings:
            self.report = {"available": False, "why": self.why}
            return self.report
        judge_sampled = self.self_enabled
        self.close()
        self.report = {
            "available": True, "method": f"perf task-clock, one sample per {PERIOD_US} us of CPU per thread",
            "samples": {PHASES[p]: {k: v for k, v in self.counts[p].items() if v} for p in range(len(PHASES))
                        if any(self.counts[p].values())},
            "requests": {PHASES[p]: n for p, n in enumerate(self.requests) if n},
            "lost": self.lost, "unreadable": self.unreadable, "map_denied": self.denied,
            "denied_at": self.denied_at,
            "judge_sampled_alike": judge_sampled,
            "files": dict(sorted(self.files.items(), key=lambda kv: -kv[1])[:12]),
            "identified": {path: {"kind": kind, "what": what}
                           for path, (kind, what) in ((p, f) for p, f in self.identified.items() if f)},
            # How the candidate's own code was told: by the hashes of what the judge built, or by place.
            "own_by": "judge_builds" if self.judge_builds is not None else "build_cache_path",
            "not_judge_built": sorted(p for p, ok in self.own_checked.items() if not ok)[:20],
            "other_files": dict(sorted(self.other_files.items(), key=lambda kv: -kv[1])[:5]),
        }
        return self.report

    def close(self) -> None:
        for ring in self.rings:
            ring.close()
        self.rings = []
        if self.self_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.self_fd)
            self.self_fd = -1


def _state(pid: int) -> str:
    """The process's state letter and owner as /proc shows them (for evidence)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3].decode()
        return f"state {state}, /proc owner {os.stat(f'/proc/{pid}').st_uid}"
    except OSError as exc:
        return f"gone ({exc.strerror})"


def _phase(op: str | None, key: str | None) -> int:
    if op is None:
        return IDLE
    if op == "call":
        return CALL
    if op == "time":
        return NULL if key == "null" else TIMED
    if op == "flush":
        return FLUSH
    return OTHER
