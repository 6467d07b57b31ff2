"""The judge's handle on the candidate worker: requests out, replies in, everything checked.

The judge never imports or runs candidate code. `WorkerClient` sends one request at a time and
takes exactly one reply for it; a reply with the wrong id, a message nobody asked for, a closed
socket, or a reply whose fields are not what the request calls for is a `WorkerBroken` (the
verdict becomes runtime_error, never ok). A reply that says the candidate raised is a
`CandidateRaised`, carrying the worker's error record as data.

`RemoteModel` is one `ModelNew` instance living in the worker, built from the reference's
weights; its watched calls return (outputs at return, evidence), its timed calls return raw
samples, and `Clock` keeps the judge's own wall time of every timed round trip so that the
worker's samples can be held against it.
"""

from __future__ import annotations

import hashlib
import math
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator.judge.proc_view import (
    cpu_ns,
    executable_files,
    filters_of,
    filters_text,
    mapped_libraries,
    process_cpu_clock,
    seccomp_mode,
    uid_of,
    worker_helpers,
)
from agentforge.evaluator.protocol import messages, wire
from agentforge.evaluator.protocol.arena import Arena
from agentforge.evaluator.protocol.messages import CandidateRaised, WorkerBroken, error_record

_perf_counter_ns = time.perf_counter_ns


@dataclass(frozen=True)
class SeccompNames:
    """The system calls the sandbox's seccomp filters refuse (`sandbox.seccomp`): the guard's, from
    setup on, and the seal's, while timed. Given by whoever started the worker."""

    guarded: tuple[str, ...] = ()
    sealed: tuple[str, ...] = ()


class WorkerClient:
    """One worker process, one request at a time."""

    def __init__(self, sock: Any, pid: int, proc: Any = None, older: set[tuple[int, str]] | None = None,
                 filters: SeccompNames | None = None):
        self.sock, self.pid, self.proc = sock, pid, proc
        self.filters = filters or SeccompNames()  # what the sandbox's filters refuse, named for the verdict
        # processes below the judge from before the worker (the seal's check leaves them out)
        self.older = older if older is not None else set()
        self._next_id = 0
        self.closed = False
        self.reaped = False
        self.mapped_at_setup: set[str] | None = None
        self.code_at_setup: dict[str, str] | None = None  # every file mapped executable then, not only `*.so`
        self.landing_owner: object | None = None  # the RemoteModel whose landing arena the worker holds (one at a time)
        self.sampler: Any = None  # the judge's native sampler of this worker (`native_sampler`), told of each request
        self.separation: dict[str, Any] = {}  # how the worker is kept apart (`setup`, `seal`), for the provenance
        # The control worker (`judge.control`): started and set up as this one, never given candidate
        # code; its null round trips measure what the harness costs outside the timed windows now.
        self.control: WorkerClient | None = None
        # The judge's builds for this worker (`judge.judge_builds`), served while it waits on a request.
        self.builds: Any = None

    def setup(self, **fields: Any) -> None:
        """Send the first message (`messages.Setup`'s fields) and read the worker's separation."""
        reply = self.send(messages.Setup(**fields))
        if reply.get("ready") is not True:
            raise WorkerBroken("the worker did not confirm its setup")
        self.mapped_at_setup = mapped_libraries(self.pid)
        self.code_at_setup = executable_files(self.pid)
        said = reply.get("separation")
        said = {k: str(v)[:300] for k, v in said.items() if isinstance(k, str)} if isinstance(said, dict) else {}
        # What the worker said it did, then what the judge reads of it from outside (/proc).
        self.separation = {**said, "worker_uid": uid_of(self.pid), "guard_seen": seccomp_mode(self.pid) == 2}

    def seal(self) -> list[tuple[str, str]]:
        """Seal the worker before timing (no new process from now on: the sandbox's seal filter), then
        check from outside that every thread carries one more filter, and that no process of the
        worker's besides it is alive: (rule, evidence) for what is wrong; empty when all holds or
        the guard could not be installed at setup (then the provenance says so)."""
        before = filters_of(self.pid)
        reply = self.send(messages.Seal())
        after = filters_of(self.pid)
        self.separation["sealed"] = str(reply.get("sealed", "no answer"))[:300]
        if self.builds is not None:
            self.builds.close("the worker is sealed for timing")
        self._seal_control()
        others = {self.control.pid} if self.control is not None else set()
        found = [("worker_unsealed", f"a process of the worker's alive when it was sealed: {h}")
                 for h in worker_helpers(os.getpid(), self.pid, self.older, others)]
        if self.separation.get("guard_seen") is not True:
            return found
        counted = all(t.filters >= 0 for t in after.values())
        grown = bool(after) and all(t.mode == 2 and (not counted or t.filters > before.get(tid, t).filters
                                                     or tid not in before) for tid, t in after.items())
        if not grown:
            found.append(("worker_unsealed", f"the seal filter is missing: the worker answered "
                                             f"{self.separation['sealed']!r}, /proc shows {filters_text(after)}"))
        return found

    def _seal_control(self) -> None:
        """The control worker sealed as this one is (its filters cost what the worker's do); one that
        does not answer is dropped (the judge's own replica bounds the outside windows then)."""
        if self.control is None:
            return
        try:
            self.control.send(messages.Seal())
        except (WorkerBroken, CandidateRaised):
            self.drop_control()

    def drop_control(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None

    def libraries_since_setup(self) -> list[str]:
        """Shared objects mapped into the worker since its setup (before any candidate code), read by
        the judge: whatever opened them (ctypes, cffi, the loader from native code)."""
        now = mapped_libraries(self.pid) if not self.closed else None
        if now is None or self.mapped_at_setup is None:
            return []
        return sorted(now - self.mapped_at_setup)

    def code_it_wrote(self) -> list[str]:
        """Files mapped executable into the worker since its setup that it wrote itself (owned by its
        uid, where that is not the judge's) and that are no artifact the judge built (by content):
        machine code that no build rule read. Only where the judge builds the worker's code
        (`builds`): elsewhere the worker's own builds are files it wrote. Read by the judge, through
        the mapping itself (`/proc/PID/map_files`: the file it maps, even one deleted since), else through
        the worker's own view of its files (`/proc/PID/root`: it has a /tmp of its own). A mapping whose
        file can be read neither way counts too where it was deleted: nothing honest removes code it
        runs, and a removed file is what would otherwise escape this check."""
        worker_uid = uid_of(self.pid) if not self.closed else None
        if self.builds is None or worker_uid is None or worker_uid == os.geteuid() or self.code_at_setup is None:
            return []
        now = executable_files(self.pid) or {}
        found = []
        for path in sorted(now.keys() - self.code_at_setup.keys()):
            opened = _first_readable([f"/proc/{self.pid}/map_files/{now[path]}", f"/proc/{self.pid}/root{path}", path])
            if opened is None:
                if path.endswith(" (deleted)"):
                    found.append(path)
                continue
            try:
                with opened as f:
                    if os.fstat(f.fileno()).st_uid != worker_uid:
                        continue
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError:
                continue
            if digest not in self.builds.artifacts:
                found.append(path)
        return found[:20]

    def send(self, message: messages.Request) -> dict[str, Any]:
        """One typed request, its reply (checked as `request` checks every reply)."""
        return self.request(message.op, **message.to_fields())

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """The transport under `send`: one request of `op` with these fields, its reply."""
        if self.closed:
            raise WorkerBroken("the worker is gone")
        self._next_id += 1
        ident = self._next_id
        if self.sampler is not None:
            self.sampler.on_request(op, fields.get("key"))
        try:
            if wire.pending(self.sock):
                raise WorkerBroken("the worker sent a message nobody asked for (or closed its channel)")
            message = {"id": ident, "op": op, **fields}
            wire.send(self.sock, message)
            reply = wire.receive(self.sock)
            while reply.get("op") == messages.Build.op and self.builds is not None:
                wire.send(self.sock, self.builds.serve(reply))  # the worker's build, mid-request
                reply = wire.receive(self.sock)
        except wire.PeerClosed as exc:
            status, signum = self._exit_status()
            self._fail()
            raise WorkerBroken(f"the worker exited during '{op}' ({status})", signal=signum) from exc
        except (wire.WireError, OSError) as exc:
            self._fail()
            raise WorkerBroken(f"the worker broke the protocol during '{op}': {exc}") from exc
        finally:
            if self.sampler is not None:
                self.sampler.on_request(None)
        if reply.get("id") != ident:
            self._fail()
            raise WorkerBroken(f"the worker answered a question it was not asked (id {reply.get('id')!r}, "
                               f"expected {ident})")
        if "raised" in reply:
            raise CandidateRaised(error_record(reply["raised"]))
        return reply

    def _exit_status(self) -> tuple[str, int | None]:
        """How the worker ended: (words, the signal that killed it or None). Waits briefly for it."""
        deadline = time.monotonic() + 2.0
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return "exit status unknown", None
            if pid:
                break
            if time.monotonic() > deadline:
                return "still running", None
            time.sleep(0.01)
        self.reaped = True
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            return f"killed by signal {signum} ({_signal_name(signum)})", signum
        return f"exit code {os.WEXITSTATUS(status)}", None

    def _fail(self) -> None:
        self.closed = True
        self.close()

    def close(self) -> None:
        """Shut the worker (and its control) down and reap it; a worker that will not go is killed."""
        self.drop_control()
        if self.sock is not None:
            try:
                if not self.closed:
                    wire.send(self.sock, {"id": 0, "op": messages.Shutdown.op})
            except (OSError, wire.WireError):
                pass
            self.sock.close()
            self.sock = None
        self.closed = True
        if self.reaped:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid:
                return
            time.sleep(0.01)
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def refused_syscall_evidence(client: WorkerClient, death: str) -> str:
    """What the judge can say of a worker its seccomp filter killed. The kernel kills at once and
    leaves no record the judge can read (no audit log in the sandbox), so the refused call is named
    by the filters that were on: the guard's classes, and after the seal any new process too."""
    sealed = client.separation.get("sealed") == "installed"
    refused = "a system call aimed at another process (" + ", ".join(client.filters.guarded) + ")"
    if sealed:
        refused += " or a new process while sealed for timing (" + ", ".join(client.filters.sealed) + ")"
    return f"the worker {death.removeprefix('the worker ')}: its seccomp filter refused {refused}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


NULL_EVERY = 2  # a null round trip before every second timed call, paired with it


@dataclass
class Clock:
    """The judge's wall time of each timed round trip and of null round trips interleaved with
    them (the same inputs in, outputs shaped like the reference's out, no work), so that a change
    in the machine's load moves both alike; and the CPU time the worker process spent in each
    (all its threads, read from the kernel), empty where that clock cannot be read."""

    wall_us: list[float] = field(default_factory=list)
    null_wall_us: list[float] = field(default_factory=list)
    paired_null: list[int] = field(default_factory=list)  # per timed call: the index of its null
    cpu_us: list[float] = field(default_factory=list)
    null_cpu_us: list[float] = field(default_factory=list)
    # Outside the timed windows: the worker's CPU time from the judge's writing its inputs to the start
    # of the timed request (the input staging and the cache flush), one entry per call and per null
    # (NaN where the clock gave no reading). No candidate code belongs there, so the two must
    # cost alike, and what the same work costs the judge (`stage_timing.outside_disagreement`).
    outside_cpu_us: list[float] = field(default_factory=list)
    null_outside_cpu_us: list[float] = field(default_factory=list)
    # Per call: whether its inputs were written to the arena just before it (else it reuses the null's
    # beside it, already staged once, so its staging runs warm in cache and costs less).
    outside_fresh: list[bool] = field(default_factory=list)
    # The judge's own CPU time for the same staging and flush (its thread, after each null): what that
    # work costs where no candidate code runs, the clean reference for the two lists above.
    replica_cpu_us: list[float] = field(default_factory=list)
    # The control worker's (`judge.control`) outside and timed CPU time in a null round trip on the same
    # inputs, one per null of this worker's (sent after the call that reuses that null's inputs: sent
    # before the null, it shifted this worker's null windows by 3-9 %): what the harness costs now.
    control_outside_cpu_us: list[float] = field(default_factory=list)
    control_null_cpu_us: list[float] = field(default_factory=list)
    control_null_wall_us: list[float] = field(default_factory=list)
    control_lost: str = ""  # why the control stopped answering mid-loop (its readings end there)

    def per_call_us(self, last: int | None = None) -> list[float]:
        """The judge's estimate of each call (of the `last` ones): its round trip less its null's."""
        return self._less_null(self.wall_us, self.null_wall_us, last)

    def per_call_cpu_us(self, last: int | None = None) -> list[float]:
        """The worker's CPU time for each call (of the `last` ones): its round trip's less its null's."""
        if len(self.cpu_us) != len(self.wall_us) or len(self.null_cpu_us) != len(self.null_wall_us):
            return []
        return self._less_null(self.cpu_us, self.null_cpu_us, last)

    def _less_null(self, calls: list[float], nulls: list[float], last: int | None) -> list[float]:
        if not nulls:
            return []
        pairs = list(zip(calls, self.paired_null, strict=True))
        pairs = pairs[-last:] if last else pairs
        return [w - nulls[n] for w, n in pairs]

    def noise_us(self) -> float:
        return spread(self.null_wall_us)

    def cpu_noise_us(self) -> float:
        return spread(self.null_cpu_us)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def spread(values: list[float]) -> float:
    """The median absolute deviation (0 below three values)."""
    if len(values) < 3:
        return 0.0
    median = statistics.median(values)
    return statistics.median(abs(w - median) for w in values)


@dataclass
class _RoundTrip:
    """One timed round trip as the judge saw it: the worker's own figures (device_us, closed_us), the
    output, the judge's wall time of the call's request, the worker's CPU time in it, and the worker's
    CPU time between the judge's writing the inputs and that request (None where a clock was
    unreadable)."""

    device_us: float
    closed_us: float
    output: Any
    wall_us: float
    cpu_us: float | None
    outside_cpu_us: float | None
    fresh: bool


class RemoteModel:
    """A `ModelNew` instance in the worker, addressed by key."""

    def __init__(self, client: WorkerClient, key: str, device: torch.device):
        self.client, self.key, self.device = client, key, device
        self.clock = Clock()
        self.cpu_clock = process_cpu_clock(client.pid)
        self.flush = True
        self.head_start = False  # TimingConfig.head_start: the worker queues it before its start event
        self.null_like: list[list[Any]] = []
        self._arena: Arena | None = None
        self._arena_holds: list[tuple[int, int]] | None = None  # the buffers (pointer, version) last written
        # What timed calls did that a checked call may not (aliasing, input changes), as the worker
        # reported it after each call's window: collected by the timing stage.
        self.timed_evidence: list[tuple[str, str]] = []
        self._landing: Arena | None = None
        self._landing_sent = False
        # Whether the judge repeats the worker's staging and flush after each null, on its own thread
        # (`Clock.replica_cpu_us`): set by the timing stage where it holds the worker's CPU outside the
        # timed windows against it (the CPU backend, one thread), and the inputs are small enough to copy.
        self.replica = False
        self._replica: tuple[list[torch.Tensor], Any] | None = None
        self._arena_writes = 0
        self.control: RemoteModel | None = None  # the control worker's null, timed beside this one's

    @classmethod
    def construct(cls, client: WorkerClient, key: str, init: list[Any], state: dict[str, torch.Tensor],
                  device: torch.device) -> RemoteModel:
        client.send(messages.Construct(key=key, init=list(init), state=dict(state)))
        return cls(client, key, device)

    def watched_call(self, where: str, inputs: list[Any] | None = None, refill: list[Any] | None = None,
                     ) -> tuple[Any, list[tuple[str, str]]]:
        """Outputs as they were when forward returned, and what the worker's watches saw."""
        landing, sent = self._landing_fields()
        try:
            reply = self.client.send(messages.Call(key=self.key, slot=self.key, inputs=inputs, refill=refill,
                                                   where=where, **landing))
        finally:
            _close(sent)
        call = messages.CallReply.parse(reply)
        return self._landed(call.output, copy=True), call.evidence

    def close(self) -> None:
        if self.control is not None:
            self.control.close()
        for arena in (self._arena, self._landing):
            if arena is not None:
                arena.close()
        self._arena = self._landing = None

    def dry_call(self, inputs: list[Any], where: str) -> tuple[list[dict[str, Any]], str]:
        """ModelNew's host code with Triton launches recorded, not run: the worker gets the inputs'
        shapes and dtypes only and makes empty tensors of its own (contents do not matter there)."""
        shapes = [{"__empty__": [list(v.shape), str(v.dtype).removeprefix("torch.")]} if isinstance(v, torch.Tensor)
                  else v for v in inputs]
        reply = self.client.send(messages.Call(key=self.key, slot=f"{self.key}/dry", empty_inputs=shapes,
                                               where=where, dry=True))
        dry = messages.DryCallReply.parse(reply)
        return dry.specs, dry.note

    def _timed(self, key: str, buffers: list[Any], want_output: bool) -> _RoundTrip:
        """One timed round trip. The inputs travel through the judge's input arena (written here,
        mapped read-only by the worker), the outputs through its landing arena (filled by the
        worker, copied out here at once)."""
        # The flush is a round trip of its own, outside the judge's clock. The null call gets one too:
        # the harness's own work around a call (its code and data) runs cold after a flush, and
        # without one the null's round trip missed that work (an honest worker then seemed to spend
        # up to 1.7x the CPU its call took on small inputs). The worker copies the inputs into its
        # own buffers in that round trip, before flushing: copied after it, they would sit warm in
        # the cache (on a GPU, every write goes through L2) for the candidate's timed call, while
        # the baselines' inputs, written before their flush, start cold.
        written = self._arena_writes
        fields, sent = self._arena_inputs(buffers)
        fresh = self._arena_writes != written
        sent_landing: list[wire.SharedFile] = []
        # Outside the timed window: from here (the inputs are in the arena, which the worker can read
        # as soon as they are written) to the call's request. The idle gap before is left out: nothing
        # the next call needs is there yet, and a call's own aftermath (its output freed after the
        # reply) would fall on whichever round trip came next.
        outside_from = cpu_ns(self.cpu_clock)
        try:
            if self.flush:
                self.client.send(messages.Flush(**fields))
                fields = {"staged": True}
            cpu_begin = cpu_ns(self.cpu_clock)
            begin = _perf_counter_ns()
            landing, sent_landing = self._landing_fields()
            reply = self.client.send(messages.Time(key=key, want_output=want_output, head_start=self.head_start,
                                                   null_like=self.null_like, **fields, **landing))
        finally:
            _close(sent + sent_landing)
        timed = messages.TimeReply.parse(reply, want_output)
        output = self._landed(timed.output, copy=False) if want_output else None
        wall = (_perf_counter_ns() - begin) / 1e3
        if key != "null":
            self.timed_evidence += timed.timed_rules
        cpu_end = cpu_ns(self.cpu_clock)
        cpu = (cpu_end - cpu_begin) / 1e3 if cpu_begin is not None and cpu_end is not None else None
        outside = (cpu_begin - outside_from) / 1e3 if cpu_begin is not None and outside_from is not None else None
        return _RoundTrip(timed.device_us, timed.closed_us, output, wall, cpu, outside, fresh)

    def _replica_us(self) -> float:
        """The worker's work outside a timed window, done here on the judge's thread: the inputs read
        from the arena into buffers of the judge's own, then the cache flushed (microseconds of CPU)."""
        from agentforge.evaluator.timing import CacheFlusher

        if self._replica is None:
            tensors = self._arena.tensors if self._arena is not None else []
            self._replica = ([torch.empty(t.shape, dtype=t.dtype, device=self.device) for t in tensors],
                             CacheFlusher(self.device, self.flush))
        inputs, flusher = self._replica
        begin = time.thread_time_ns()
        if self._arena is not None:
            self._arena.read_into(inputs)
        flusher()
        return (time.thread_time_ns() - begin) / 1e3

    def expect(self, outputs_like: Any) -> None:
        """Outputs shaped like these (the reference's, real or on the meta device) land in an arena
        the judge makes; anything else the worker sends in a message of its own."""
        from agentforge.task import flatten_tensors

        like = [torch.empty(t.shape, dtype=t.dtype) for t in flatten_tensors(outputs_like)]
        if self._landing is not None and self._landing.fits(like):
            return
        if self._landing is not None:
            self._landing.close()
        self._landing = Arena.create(like) if like else None
        self._landing_sent = False

    def _landing_fields(self) -> tuple[dict[str, Any], list[wire.SharedFile]]:
        if self._landing is None or (self._landing_sent and self.client.landing_owner is self):
            return {}, []
        shared = self._landing.share(writable=True)
        self._landing_sent = True
        self.client.landing_owner = self  # another model's call since would have landed in its arena
        return {"landing": shared, "landing_slots": self._landing.slots}, shared

    def _arena_inputs(self, buffers: list[Any]) -> tuple[dict[str, Any], list[wire.SharedFile]]:
        tensors = [b for b in buffers if isinstance(b, torch.Tensor)]
        fields: dict[str, Any] = {}
        sent: list[wire.SharedFile] = []
        if self._arena is None or not self._arena.fits(tensors):
            if self._arena is not None:
                self._arena.close()
            self._arena = Arena.create(tensors)
            self._arena_holds = None
            sent = self._arena.share(writable=False)
            fields["arena"] = sent
            fields["arena_slots"] = self._arena.slots
        # Written again only when a buffer changed since the last write: the null and the real round
        # trip of one repetition send the same inputs. Every change the judge makes to its buffers (a
        # refill, a baseline that writes its input) is an in-place torch operation, which bumps the
        # tensor's version counter; the worker maps the arena read-only.
        holds = [(t.data_ptr(), t._version) for t in tensors]
        if holds != self._arena_holds:
            self._arena.write(tensors)
            self._arena_holds = holds
            self._arena_writes += 1
        index = iter(range(len(tensors)))
        fields["args"] = [{"__arena__": next(index)} if isinstance(b, torch.Tensor) else b for b in buffers]
        return fields, sent

    def _landed(self, structure: Any, copy: bool) -> Any:
        """The worker's output: placeholders filled from the landing arena (copied out now)."""
        if self._landing is None:
            return _sendable(structure)
        tensors = self._landing.read()
        placed = [t.to(self.device) if self.device.type != "cpu" else (t.clone() if copy else t) for t in tensors]
        return _place(structure, placed)

    def timer(self, buffers: list[Any]) -> tuple[float, float, Any]:
        """One timed call (the `timing.Subject.timer` protocol); the judge keeps its own wall time."""
        clock = self.clock
        paired = not clock.null_wall_us or len(clock.wall_us) % NULL_EVERY == 0
        if paired:
            null = self._timed("null", buffers, True)
            clock.null_wall_us.append(null.wall_us)
            if null.cpu_us is not None:
                clock.null_cpu_us.append(null.cpu_us)
            clock.null_outside_cpu_us.append(_or_nan(null.outside_cpu_us))
            if self.replica:
                clock.replica_cpu_us.append(self._replica_us())
        call = self._timed(self.key, buffers, True)
        clock.wall_us.append(call.wall_us)
        clock.paired_null.append(len(clock.null_wall_us) - 1)
        if call.cpu_us is not None:
            clock.cpu_us.append(call.cpu_us)
        clock.outside_cpu_us.append(_or_nan(call.outside_cpu_us))
        clock.outside_fresh.append(call.fresh)
        if paired:
            self._control_null(buffers)
        return call.device_us, call.closed_us, call.output

    def _control_null(self, buffers: list[Any]) -> None:
        """The control worker's null round trip on the same inputs, just before this worker's."""
        if self.control is None:
            return
        try:
            trip = self.control._timed("null", buffers, True)
        except (WorkerBroken, CandidateRaised) as exc:
            self.clock.control_lost = str(exc)[:300]
            self.control.close()
            self.control.client.close()
            self.control = None
            return
        self.clock.control_outside_cpu_us.append(_or_nan(trip.outside_cpu_us))
        self.clock.control_null_cpu_us.append(_or_nan(trip.cpu_us))
        self.clock.control_null_wall_us.append(trip.wall_us)

    def calibrate(self, outputs_like: Any) -> None:
        """The null candidate's outputs: shaped like the reference's, so that its round trip costs
        what a real call's does through the wire, less the work."""
        from agentforge.task import flatten_tensors

        self.null_like = [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in flatten_tensors(outputs_like)]
        self.expect(outputs_like)
        if self.control is not None:
            self.control.flush, self.control.head_start = self.flush, self.head_start
            self.control.calibrate(outputs_like)


class Unsendable:
    """Stands for an output the worker could not send (not a tensor, number or sequence)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<unsendable {self.type_name}>"


def _close(files: list[wire.SharedFile]) -> None:
    for f in files:
        try:
            os.close(f.fd)
        except OSError:
            pass


def _place(value: Any, tensors: list[torch.Tensor]) -> Any:
    """`value` with each `{"__arena__": i}` replaced by the i-th output copy (each used once)."""
    used: set[int] = set()

    def walk(v: Any) -> Any:
        if isinstance(v, dict) and set(v) == {"__arena__"}:
            i = v["__arena__"]
            if type(i) is not int or not 0 <= i < len(tensors) or i in used:
                raise WorkerBroken(f"bad output arena reference {i!r}")
            used.add(i)
            return tensors[i]
        if isinstance(v, list | tuple):
            return type(v)(walk(x) for x in v)
        return _sendable(v)

    return walk(value)


def _sendable(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__unsendable__"}:
        return Unsendable(str(value["__unsendable__"])[:100])
    if isinstance(value, list | tuple):
        return type(value)(_sendable(v) for v in value)
    return value


def _first_readable(paths: list[str]) -> Any:
    """The first of `paths` that opens (binary), or None."""
    for path in paths:
        try:
            return open(path, "rb")
        except OSError:
            continue
    return None
