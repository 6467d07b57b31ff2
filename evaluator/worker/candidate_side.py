"""The candidate worker's half of the evaluator: everything that runs candidate code.

Runs only in the untrusted worker process (`sandbox/worker.py`), which holds no seed, no reference
model, no expected output and no channel a verdict could be written to. The judge sends it input
tensors and the reference's weights; it answers with output tensors, raw timing samples and the
evidence its in-process watches gathered. All of that is the candidate's own to spoil: the judge
decides on it as data, checks the outputs by value against a reference it alone holds, and holds
the worker's clock against its own.

One `Worker` per process; each `handle_*` method serves one request of the protocol, typed
(`protocol.messages`): `serve_request` parses every request strictly before a handler sees it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator import device_state, integrity, native, op_observer, prepack, triton_aot
from agentforge.evaluator.guards import (
    ConcurrencyWatch,
    TamperSnapshot,
    inspect_outputs,
    precision_switches,
)
from agentforge.evaluator.models import fingerprint, set_mode
from agentforge.evaluator.protocol import messages
from agentforge.evaluator.protocol.arena import Arena
from agentforge.evaluator.protocol.messages import (
    Build,
    BuildReport,
    Call,
    Construct,
    DeviceProfile,
    Drive,
    Finish,
    Flush,
    Load,
    Time,
)
from agentforge.evaluator.protocol.wire import SharedFile
from agentforge.evaluator.result import to_plain
from agentforge.evaluator.timing import CacheFlusher, head_start, timing_events
from agentforge.evaluator.worker.loading import load_candidate
from torch.profiler import record_function

from agentforge.task import flatten_tensors

_perf_counter_ns = time.perf_counter_ns
_synchronize = torch.cuda.synchronize


class WorkerFailure(Exception):
    """A request the worker could not serve (the candidate raised); sent back as an error reply."""


def _error(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "traceback_tail": "".join(traceback.format_exception(exc))[-4000:]}


def _copy_at_return(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return torch.Tensor.clone(out).as_subclass(torch.Tensor)
    if isinstance(out, list | tuple):
        return type(out)(_copy_at_return(o) for o in out)
    return out


def _wire_safe(out: Any) -> Any:
    """What of an output can travel: plain tensors, numbers, None, lists and tuples of them;
    anything else becomes its type name (the judge flags non-tensor outputs)."""
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, list | tuple):
        return type(out)(_wire_safe(o) for o in out)
    if out is None or isinstance(out, bool | int | float | str):
        return out
    return {"__unsendable__": type(out).__qualname__}


@dataclass
class Worker:
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    model_cls: type | None = None
    models: dict[str, Any] = field(default_factory=dict)
    buffers: dict[str, list[Any]] = field(default_factory=dict)
    recorder: prepack.WeightOpRecorder = field(default_factory=prepack.WeightOpRecorder)
    weights: dict[str, prepack.Spans] = field(default_factory=dict)  # per model: its weights' storages
    snapshot: TamperSnapshot | None = None
    builds_at_load: int = 0  # native.BUILD_EVENTS made by the time the candidate's module loaded
    watch: ConcurrencyWatch | None = None
    interpret: bool = False
    emulated: bool = False  # CUDA kernels executed by the CPU emulation (cuda_emulation)
    drive_only: bool = False  # emulated: the drive decides the build stage only (ends after one call)
    reached: str = "module"  # emulated: how far the drive got (module, construct, forward)
    stopped: str = ""  # emulated: what stopped it
    launches: Any = None
    launch_log: Any = None
    flusher: CacheFlusher | None = None
    in_arena: Arena | None = None
    landing: Arena | None = None
    device_inputs: list[torch.Tensor] = field(default_factory=list)
    staged: list[Any] | None = None  # the next timed call's inputs, copied before the flush
    returned: tuple[str, list[torch.Tensor], list[torch.Tensor]] | None = None  # the last call's outputs
    observer: Any = None
    observed: op_observer.Attribution = field(default_factory=op_observer.Attribution)
    observer_broken: str = ""
    l2_found: list[str] = field(default_factory=list)  # persisting-L2 state found before timed calls

    # ----- build ------------------------------------------------------------------------------
    def handle_load(self, request: Load) -> dict[str, Any]:
        self.device = torch.device(request.device)
        _native_calls.install()
        self.observer = op_observer.start()  # from the candidate's import on, every thread
        self.interpret = request.interpret
        if self.interpret:
            from agentforge.evaluator.worker import triton_interpret

            triton_interpret.enable()
        needs_gpu: list[str] = []
        if request.emulate:  # CUDA without a GPU: every build judged by nvcc, then emulated
            from agentforge.evaluator.cuda_emulation import environment

            environment.activate(request.arch)
            needs_gpu, self.emulated = environment.NEEDS_GPU, True
            self.drive_only = request.drive_only
        self.snapshot = TamperSnapshot.take()
        self.watch = ConcurrencyWatch.start()
        loaded = load_candidate(request.source, request.backend, request.compile_only, request.arch,
                                module_name=request.module_name)
        self.model_cls = loaded.model_cls
        findings = integrity.build_findings(native.BUILD_EVENTS)
        self.builds_at_load = len(native.BUILD_EVENTS)
        if self.interpret and self.model_cls is not None:
            self.launches = triton_aot.capture()
            self.launch_log = self.launches.__enter__()
        return {"compile": to_plain(loaded.compile), "error": to_plain(loaded.error) if loaded.error else None,
                "compile_failed": loaded.compile_failed, "has_model": self.model_cls is not None,
                "needs_gpu": list(needs_gpu),
                "build_findings": [[f.rule, f.evidence] for f in findings]}

    def handle_drive(self, request: Drive) -> dict[str, Any]:
        """Compile-only CUDA: ModelNew constructed and driven under the CUDA lookalike, so that every
        build it would make on a GPU is made (see `cuda_lookalike`)."""
        from agentforge.evaluator.worker import cuda_lookalike

        return cuda_lookalike.report(self.model_cls, request)

    def handle_build_report(self, request: BuildReport) -> dict[str, Any]:
        """Emulated CUDA: the compile-only builds the correctness stage's drive made so far."""
        from agentforge.evaluator.worker import cuda_lookalike

        progress = {"reached": self.reached, "stopped": self.stopped}
        return cuda_lookalike.build_report(request.backend, request.arch, progress)

    @contextlib.contextmanager
    def _drive_step(self, step: str) -> Iterator[None]:
        """Emulated: how far the drive got, and what stopped it, for the build report."""
        try:
            yield
        except BaseException as exc:
            if self.emulated and not self.stopped:
                where = "ModelNew(...)" if step == "construct" else "forward"
                self.stopped = f"{where}: {type(exc).__name__}: {exc}"[:500]
            raise
        if self.emulated and self.reached != "forward":
            self.reached = step

    def _end_of_drive(self) -> None:
        """Emulated, after a call: end the correctness stage once the builds decide the verdict."""
        from agentforge.evaluator.cuda_emulation import environment

        reason = environment.stop_reason(called=True)
        if not reason and (self.drive_only or integrity.build_findings(native.BUILD_EVENTS)):
            reason = "integrity findings reject the candidate: the drive decides the build stage only"
        if reason:
            raise WorkerFailure(f"the drive ended: {reason}")

    # ----- models -----------------------------------------------------------------------------
    def handle_construct(self, request: Construct) -> dict[str, Any]:
        """ModelNew(*init) with the reference's weights where names and shapes match."""
        if self.model_cls is None:
            raise WorkerFailure("no ModelNew was loaded")
        with torch.random.fork_rng(devices=[]), self._drive_step("construct"):
            torch.manual_seed(0)  # the weights that matter come from the reference, below
            model = self.model_cls(*request.init)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
            own = model.state_dict()
            state = {k: v.to(self.device) for k, v in request.state.items()}
            model.load_state_dict({k: v for k, v in state.items() if k in own and own[k].shape == v.shape},
                                  strict=False)
            set_mode(model)
            with self._drive_step("construct"):
                prepack.prepare(model)  # ModelNew.prepare_weights(): the loaded weights, no input
        self.models[request.key] = model
        self.weights[request.key] = prepack.weight_storages(model)
        return {}

    def _inputs(self, request: Call) -> list[Any]:
        slot = request.slot
        if request.empty_inputs is not None:
            self.buffers[slot] = [_empty(v, self.device) for v in request.empty_inputs]
        elif request.inputs is not None:
            self.buffers[slot] = [v.to(self.device) if isinstance(v, torch.Tensor) else v
                                  for v in request.inputs]
        elif request.refill is not None:
            for buffer, value in zip(self.buffers[slot], request.refill, strict=True):
                if isinstance(buffer, torch.Tensor):
                    buffer.copy_(value)
        return self.buffers[slot]

    # ----- one watched call -------------------------------------------------------------------
    def _late_writes(self) -> list[list[str]]:
        """The previous watched call's outputs, as they are now, against their copy at return: work
        that landed after forward returned (a native thread, a side stream) shows here, a whole
        request later, however long it waited."""
        if self.returned is None:
            return []
        where, live, copies = self.returned
        self.returned = None
        if self.device.type == "cuda":
            _synchronize()
        if any(not torch.equal(a, b) for a, b in zip(live, copies, strict=True)):
            return [["unsynchronized_work", f"{where}: the output changed after forward returned "
                                            "(work outside the call: a thread, a side stream)"]]
        return []

    def handle_call(self, request: Call) -> dict[str, Any]:
        late = self._late_writes()
        self._take_landing(request)
        model = self.models[request.key]
        inputs = self._inputs(request)
        where = request.where
        if request.dry:
            return self._dry_call(model, inputs, where)
        evidence: list[list[str]] = late
        before = fingerprint(inputs)
        device_state.poison_free_memory(self.device)
        watch = ConcurrencyWatch.start()
        switches = precision_switches()
        self.recorder.watch(self.weights.get(request.key, prepack.Spans(())), inputs)
        with self._drive_step("forward"), torch.no_grad(), record_function(op_observer.WINDOW), self.recorder:
            out = model(*inputs)
        evidence += prepack.evidence(self.recorder.on_weights, where)
        if self.emulated:
            self._end_of_drive()
        at_return = _copy_at_return(out)
        evidence += [["background_work", item] for item in watch.still_running(f"when forward returned ({where})")]
        now = precision_switches()
        switched = [f"{k}: {v!r} -> {now[k]!r}" for k, v in switches.items() if now[k] != v]
        if switched:
            evidence.append(["precision_switch", f"{where}: " + "; ".join(switched)])
        if self.device.type == "cuda":
            _synchronize()
            l2 = device_state.take_l2_persistence(torch.cuda.current_stream().cuda_stream)
            if l2:
                evidence.append(["l2_persistence", f"{where}: after forward, {l2}"])
        tensors = list(flatten_tensors(out))
        plain = all(type(t) is torch.Tensor and t.layout == torch.strided and not t.is_meta for t in tensors)
        if tensors and plain:
            self.returned = (where, tensors, list(flatten_tensors(at_return)))
        outputs = list(out) if isinstance(out, list | tuple) else [out]
        evidence += [list(item) for item in inspect_outputs(outputs, inputs)]
        after = fingerprint(inputs)
        if after != before:
            changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
            evidence.append(["input_mutation", f"{where}: inputs {changed} changed"])
        return {"output": self._outputs(at_return), "evidence": evidence}

    def _dry_call(self, model: Any, inputs: list[Any], where: str) -> dict[str, Any]:
        """ModelNew's host code with Triton launches recorded, not executed (see triton_aot)."""
        try:
            with torch.no_grad(), triton_aot.capture(execute=False) as dry:
                model(*inputs)
        except Exception as exc:
            return {"specs": [], "note": f"{where}: host code failed without kernel results "
                                         f"({type(exc).__name__}: {str(exc)[:200]})"}
        return {"specs": dry.specs, "note": ""}

    # ----- one timed call ---------------------------------------------------------------------
    def handle_time(self, request: Time) -> dict[str, Any]:
        """One call timed as the judge times its baselines (events on CUDA, the monotonic clock on
        the CPU, the cache flushed first). The judge also clocks the whole round trip."""
        model = self.models[request.key] if request.key != "null" else None
        self._take_landing(request)
        inputs, self.staged = (self.staged, None) if request.staged else (self._arena_inputs(request), None)
        if inputs is None:
            raise WorkerFailure("a timed call asked for staged inputs, and none were staged")
        fn = model if model is not None else self._null(request.null_like)
        window = op_observer.WINDOW if model is not None else op_observer.HARNESS_WINDOW
        with torch.no_grad(), record_function(window):
            if self.device.type == "cuda":
                start, end, closed = timing_events()
                if request.head_start:
                    head_start()
                start.record()
                out = fn(*inputs)
                end.record()
                _synchronize()
                closed.record()
                closed.synchronize()
                device_us, closed_us = start.elapsed_time(end) * 1e3, start.elapsed_time(closed) * 1e3
            else:
                begin = _perf_counter_ns()
                out = fn(*inputs)
                device_us = closed_us = (_perf_counter_ns() - begin) / 1e3
        reply: dict[str, Any] = {"device_us": device_us, "closed_us": closed_us}
        # Every timed call is held to a checked call's rules, after its window. The null call does
        # the same checks, so that their cost is in both round trips the judge's clocks subtract.
        reply["timed_rules"] = self._timed_rules(inputs, out)
        if request.want_output:
            reply["output"] = self._outputs(out)
        return reply

    def _timed_rules(self, inputs: list[Any], out: Any) -> list[list[str]]:
        """What a timed call did that a checked one may not: an output sharing memory with an input,
        an input changed (held against the judge's read-only arena, which still has what was sent)."""
        found: list[list[str]] = []
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr() for t in tensors if t.numel()}
        for o in flatten_tensors(out):
            if isinstance(o, torch.Tensor) and o.numel() and o.untyped_storage().data_ptr() in storages:
                found.append(["output_aliases_input", "a timed call returned an output that shares memory with "
                              "its input"])
                break
        if self.in_arena is not None:
            for index, now in enumerate(tensors[:len(self.in_arena.tensors)]):
                if not self.in_arena.matches(index, now):
                    found.append(["input_mutation", f"a timed call changed its input {index}"])
                    break
        return found

    def handle_device_profile(self, request: DeviceProfile) -> dict[str, Any]:
        """A few more calls on the timing inputs under the device profiler (CUDA): `device_attribution`."""
        from agentforge.evaluator import device_attribution

        return device_attribution.serve(self, request)

    def _arena_inputs(self, request: Flush | Time | DeviceProfile) -> list[Any]:
        """The timing inputs: the judge's arena copied into this worker's own buffers (on the device),
        outside the timed window."""
        if request.arena is not None:
            if self.in_arena is not None:
                self.in_arena.close()
            self.in_arena = Arena.attach(request.arena, request.arena_slots, writable=False)
            _close(request.arena)
            self.device_inputs = [t.to(self.device).clone() for t in self.in_arena.tensors]
        if self.in_arena is None:
            raise WorkerFailure("no input arena")
        if not self.in_arena.read_into(self.device_inputs):  # a buffer the candidate reshaped: anew
            self.device_inputs = [t.to(self.device).clone() for t in self.in_arena.read()]
        if request.args is None:
            raise WorkerFailure("a timed call sent no inputs")
        args = []
        for a in request.args:
            if isinstance(a, dict) and set(a) == {"__arena__"}:
                args.append(self.device_inputs[a["__arena__"]])
            else:
                args.append(a)
        return args

    def _take_landing(self, request: Call | Time) -> None:
        if request.landing is not None:
            if self.landing is not None:
                self.landing.close()
            self.landing = Arena.attach(request.landing, request.landing_slots, writable=True)
            _close(request.landing)

    def _outputs(self, out: Any) -> Any:
        """The outputs for the judge: into its landing arena when they fit it, else as they are."""
        tensors = [t for t in flatten_tensors(out) if type(t) is torch.Tensor and t.layout == torch.strided]
        if self.landing is None or not self.landing.fits(tensors) or len(tensors) != len(flatten_tensors(out)):
            return _wire_safe(out)
        self.landing.write(tensors)
        index = iter(range(len(tensors)))

        def walk(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return {"__arena__": next(index)}
            if isinstance(v, list | tuple):
                return type(v)(walk(x) for x in v)
            return _wire_safe(v)

        return walk(out)

    def _null(self, like: list[Any]) -> Any:
        """The null candidate of the judge's clock calibration: returns preallocated outputs shaped
        like the reference's, doing no work (its copy at return costs what a real output's does)."""
        if getattr(self, "_null_outputs", None) is None:
            self._null_outputs = [torch.zeros(shape, dtype=getattr(torch, dtype), device=self.device)
                                  for shape, dtype in like]
        outputs = self._null_outputs
        return lambda *inputs: outputs[0] if len(outputs) == 1 else tuple(outputs)

    def handle_flush(self, request: Flush) -> dict[str, Any]:
        """The last-level cache flushed before a timed call (a request of its own, so that the
        judge's clock of the call does not include it). With the call's inputs (`args`), they are
        copied into this worker's buffers first, so that the flush evicts them as it evicts the
        baselines' (the timed call then asks for them as `staged`)."""
        self.staged = self._arena_inputs(request) if request.args is not None else None
        if self.device.type == "cuda":  # lines pinned as persisting would survive the flush
            l2 = device_state.take_l2_persistence(torch.cuda.current_stream().cuda_stream)
            if l2 and len(self.l2_found) < 3:
                self.l2_found.append(f"before a timed call, {l2}")
        if self.flusher is None:
            self.flusher = CacheFlusher(self.device, True)
        self.flusher()
        if self.device.type == "cuda":
            _synchronize()
        return {}

    # ----- the end ----------------------------------------------------------------------------
    def _observed(self) -> op_observer.Attribution:
        """The observer's operators so far, attributed; a new observer goes on from here. An
        observer the candidate stopped or replaced is evidence in itself."""
        if self.observer is not None:
            try:
                self.observer.stop()
                op_observer.attribute(list(self.observer.events() or []), self.observed)
            except Exception as exc:
                self.observer_broken = f"{type(exc).__name__}: {str(exc)[:200]}"
            self.observer = op_observer.start()
        return self.observed

    def handle_build(self, request: Build) -> dict[str, Any]:
        """A native build the judge asks of the control worker (`native.build_artifact`): the
        artifact's bytes, never loaded here."""
        return native.build_artifact(request)

    def handle_finish(self, request: Finish) -> dict[str, Any]:
        evidence: list[list[str]] = self._late_writes()
        # Builds made after load (at the first call, say) are the candidate's like any other: their
        # flags and sources as the compiler got them face the same rules as the builds at load.
        late_builds = native.BUILD_EVENTS[self.builds_at_load:]
        evidence += [[f.rule, f"after load: {f.evidence}"] for f in integrity.build_findings(late_builds)]
        observed = self._observed()
        if self.observer_broken:
            evidence.append(["monkey_patch", f"the operator observer was stopped or broken: {self.observer_broken}"])
        if self.snapshot is not None:
            patched, switched = self.snapshot.changes()
            if patched:
                evidence.append(["monkey_patch", "replaced: " + ", ".join(patched[:10])])
            if switched:
                evidence.append(["precision_switch", "; ".join(switched)])
        if self.device.type == "cuda":  # set during the last timed call, after its flush
            l2 = device_state.take_l2_persistence(torch.cuda.current_stream().cuda_stream)
            if l2:
                self.l2_found.append(f"after the last call, {l2}")
        evidence += [["l2_persistence", found] for found in self.l2_found[:3]]
        if self.watch is not None:
            leftovers = self.watch.leftovers()
            if leftovers:
                evidence.append(["background_work", "; ".join(leftovers[:5])])
        reply: dict[str, Any] = {"evidence": evidence, "op_counts": dict(self.recorder.counts),
                                 "launch_specs": [], "launch_problems": [],
                                 "observed_ops": dict(observed.in_calls), "observed_calls": observed.calls,
                                 "background_ops": dict(observed.between_calls),
                                 "opened": sorted(_native_calls.opened)[:200],
                                 "symbols": sorted(_native_calls.symbols)[:2000]}
        if self.emulated:  # builds nvcc made and the emulation cannot run, whenever they were attempted
            from agentforge.evaluator.cuda_emulation import environment

            reply["emulation_failures"] = [*environment.NEEDS_GPU, *environment.EMULATION_FAILURES][:5]
        if self.launches is not None:
            with contextlib.suppress(Exception):
                self.launches.__exit__(None, None, None)
            reply["launch_specs"] = self.launch_log.specs
            reply["launch_problems"] = self.launch_log.problems
            self.launches = None
        return reply


class _NativeCalls:
    """A Python audit hook (it cannot be removed once added) recording the libraries opened and the
    symbols resolved through `ctypes` while candidate code is on the stack, with names assembled at
    run time as they finally were."""

    def __init__(self) -> None:
        self.opened: set[str] = set()
        self.symbols: set[tuple[str, str]] = set()
        self.installed = False

    def install(self) -> None:
        if not self.installed:
            sys.addaudithook(self._hook)
            self.installed = True

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not event.startswith("ctypes.dl"):
            return
        try:
            if not _candidate_on_stack():
                return
            if event == "ctypes.dlopen":
                self.opened.add(str(args[0])[:500])
            elif event == "ctypes.dlsym":
                self.symbols.add((str(getattr(args[0], "_name", "?"))[:500], str(args[1])[:200]))
            elif event == "ctypes.dlsym/handle":
                self.symbols.add(("?", str(args[1])[:200]))
        except Exception:
            pass


def _candidate_on_stack() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("agentforge_candidate"):
            return True
        frame = frame.f_back
    return False


_native_calls = _NativeCalls()


def _empty(value: Any, device: torch.device) -> Any:
    if isinstance(value, dict) and set(value) == {"__empty__"}:
        shape, dtype = value["__empty__"]
        return torch.empty(shape, dtype=getattr(torch, dtype), device=device)
    return value


def _close(files: Any) -> None:
    for f in files if isinstance(files, list) else []:
        if isinstance(f, SharedFile):
            with contextlib.suppress(OSError):
                os.close(f.fd)


def serve_request(worker: Worker, raw: dict[str, Any]) -> dict[str, Any]:
    """One request -> one reply body; a malformed request (`messages.ProtocolError`) and a failure of
    the candidate are error replies, not an exit."""
    try:
        request = messages.parse_request(raw)
    except messages.ProtocolError as exc:
        return messages.protocol_error_reply(exc)
    handler = getattr(worker, f"handle_{request.op}", None)
    if handler is None:  # setup and seal: served by the worker's process itself (`sandbox.worker`)
        return {"raised": {"type": "UnknownRequest", "message": f"no such request {request.op!r} here"}}
    try:
        return handler(request)
    except BaseException as exc:  # the candidate's failure (SystemExit included) is data for the judge
        return {"raised": _error(exc)}
