"""The protocol's messages: the judge's requests as typed messages, its failures, and the evidence
pairs a reply may carry, as the judge reads them.

Every request is one of the dataclasses below (`Load`, `Call`, `Time`, ...), parsed strictly on the
worker's side (`parse_request`): a malformed one is a `ProtocolError`, answered as an error reply.
A reply that breaks the protocol is a `WorkerBroken` (nothing the worker says from then on is
heard); a reply saying the candidate raised is a `CandidateRaised`, with the worker's error record
as data."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Self

from agentforge.evaluator.protocol.wire import SharedFile
from agentforge.evaluator.result import CompileRecord, ErrorRecord, from_plain

MAX_EVIDENCE_ITEMS = 200


class WorkerBroken(RuntimeError):
    """The worker died, or broke the protocol: nothing it says from now on is heard. `signal`: the
    signal that killed it, when one did (a crash of the candidate's code, reported as such)."""

    def __init__(self, message: str, signal: int | None = None, stderr_tail: str = ""):
        super().__init__(message)
        self.signal = signal


class CandidateRaised(RuntimeError):
    """The candidate's code raised while serving a request."""

    def __init__(self, record: ErrorRecord):
        super().__init__(record.message)
        self.record = record


def error_record(raw: Any) -> ErrorRecord:
    if not isinstance(raw, dict):
        return ErrorRecord(type="WorkerError", message="the worker sent a malformed error")

    def text(key: str, limit: int) -> str:
        value = raw.get(key, "")
        return value[:limit] if isinstance(value, str) else ""

    return ErrorRecord(type=text("type", 100) or "WorkerError", message=text("message", 2000),
                       traceback_tail=text("traceback_tail", 4000))


def evidence_items(raw: Any) -> list[tuple[str, str]]:
    """(rule, evidence) pairs from a reply; anything else in the list is dropped."""
    if not isinstance(raw, list):
        raise WorkerBroken("evidence is not a list")
    items = []
    for item in raw[:MAX_EVIDENCE_ITEMS]:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item):
            items.append((item[0][:64], item[1][:1000]))
    return items


# ----- the judge's requests ---------------------------------------------------------------------
# One frozen dataclass per request op. The judge builds them (`WorkerClient.send`), `to_fields` puts
# them on the wire, and the worker reads each request back through `parse_request` before any
# handler sees it: a field missing, unknown or of the wrong type is a `ProtocolError`, answered as
# an error reply. A field with a default may be left off the wire; tensor payloads are whatever the
# wire carries (`Any`), their shapes checked where they are used.


class ProtocolError(ValueError):
    """A request that is not one of the protocol's messages: an unknown op, a field missing, unknown
    or of the wrong type. The worker answers it as an error reply and goes on serving."""


ENVELOPE = ("id", "op")  # what every message carries besides its fields


@dataclass(frozen=True)
class Request:
    op: ClassVar[str] = ""

    def to_fields(self) -> dict[str, Any]:
        """The fields as they go on the wire (the op and id are the transport's): values as they
        are, tensors and shared files included, never copied."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def parse(cls, raw: Any) -> Self:
        """This message from a request as it came off the wire, strictly: the envelope (`id`, `op`)
        aside, every field it requires present, none it does not know, each of its type."""
        if not isinstance(raw, dict):
            raise ProtocolError(f"a '{cls.op}' request must be an object, not {type(raw).__name__}")
        if raw.get("op", cls.op) != cls.op:
            raise ProtocolError(f"a '{raw.get('op')}' request is not a '{cls.op}' request")
        if "id" in raw and type(raw["id"]) is not int:
            raise ProtocolError(f"'{cls.op}' request: its id must be an int, not {type(raw['id']).__name__}")
        checks = _checks(cls)
        unknown = sorted(str(k) for k in raw if k not in checks and k not in ENVELOPE)
        if unknown:
            raise ProtocolError(f"'{cls.op}' request: unknown field(s) {', '.join(unknown)}; "
                                f"it takes {', '.join(checks) or 'none'}")
        missing = [name for name, (_, _, required) in checks.items() if required and name not in raw]
        if missing:
            raise ProtocolError(f"'{cls.op}' request: missing field(s) {', '.join(missing)}")
        for name, (check, spelled, _) in checks.items():
            if name in raw and not check(raw[name]):
                raise ProtocolError(f"'{cls.op}' request: field '{name}' must be {spelled}, "
                                    f"not {_described(raw[name])}")
        return cls(**{k: v for k, v in raw.items() if k not in ENVELOPE})


@dataclass(frozen=True)
class Setup(Request):
    """The first message: how the worker hardens itself and the switches it sets (`sandbox.worker`)."""

    op: ClassVar[str] = "setup"
    workdir: str
    cache_dir: str | None = None
    cpu_threads: int = 0  # 0: torch's own choice
    device: str = "cpu"
    torch_switches: bool = True
    limits: dict[str, Any] | None = None  # `sandbox.request.Limits`, plain
    drop_to_uid: int | None = None
    cuda_visible_devices: str | None = None
    # Whether the judge samples and reads this worker (its memory map, its native sampler): then it is
    # dumpable to its own uid. The control worker is not: the candidate's worker runs as the same uid,
    # and could otherwise open its /proc/PID/mem and slow it to loosen the bound it sets.
    sampled: bool = True
    # Whether the judge builds this worker's native code (`judge.judge_builds`): its `load_cpp` and
    # `load_inline` then ask the judge (a `Build` on its socket) and load the artifact it is handed.
    judge_builds: bool = False


@dataclass(frozen=True)
class Load(Request):
    """Build and import the candidate's module."""

    op: ClassVar[str] = "load"
    source: str
    backend: str
    compile_only: bool
    arch: str
    device: str
    module_name: str
    interpret: bool = False
    emulate: bool = False
    drive_only: bool = False


@dataclass(frozen=True)
class Drive(Request):
    """Compile-only CUDA: construct ModelNew and call it under the CUDA lookalike (`cuda_lookalike`)."""

    op: ClassVar[str] = "drive"
    init: list[Any]
    inputs: list[Any]  # values, and {"__empty__": [shape, dtype]} for tensors
    arch: str
    backend: str


@dataclass(frozen=True)
class BuildReport(Request):
    """Emulated CUDA: the compile-only builds the drive made so far."""

    op: ClassVar[str] = "build_report"
    backend: str
    arch: str


@dataclass(frozen=True)
class Construct(Request):
    """ModelNew(*init) under `key`, with the reference's weights where names and shapes match."""

    op: ClassVar[str] = "construct"
    key: str
    init: list[Any]
    state: dict[str, Any]  # the reference's tensors


@dataclass(frozen=True)
class Call(Request):
    """One watched call (or, `dry`, its host code with launches recorded). Its inputs: new ones, a
    refill of the slot's buffers, or empty tensors of the shapes given."""

    op: ClassVar[str] = "call"
    key: str
    slot: str
    where: str = ""
    inputs: list[Any] | None = None
    refill: list[Any] | None = None
    empty_inputs: list[Any] | None = None
    dry: bool = False
    landing: list[SharedFile] | None = None  # the judge's output arena, when new to the worker
    landing_slots: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Flush(Request):
    """The cache flushed before a timed call; with `args`, the call's inputs staged first."""

    op: ClassVar[str] = "flush"
    args: list[Any] | None = None  # values, and {"__arena__": i} for the input arena's tensors
    arena: list[SharedFile] | None = None  # the judge's input arena, when new to the worker
    arena_slots: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Time(Request):
    """One timed call of model `key` (or of the null candidate, `key` "null", outputs `null_like`)."""

    op: ClassVar[str] = "time"
    key: str
    want_output: bool = False
    head_start: bool = False
    null_like: list[Any] = field(default_factory=list)  # [shape, dtype] per output
    staged: bool = False  # the inputs the last flush staged, else `args`
    args: list[Any] | None = None
    arena: list[SharedFile] | None = None
    arena_slots: list[dict[str, Any]] | None = None
    landing: list[SharedFile] | None = None
    landing_slots: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class DeviceProfile(Request):
    """`reps` more calls of model `key` on the timing inputs under the device profiler."""

    op: ClassVar[str] = "device_profile"
    key: str
    reps: int
    args: list[Any] | None = None
    arena: list[SharedFile] | None = None
    arena_slots: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Seal(Request):
    """No new process from now on (the sandbox's seal filter): served by `sandbox.worker` itself."""

    op: ClassVar[str] = "seal"


@dataclass(frozen=True)
class Finish(Request):
    """What the worker's process-wide watches saw."""

    op: ClassVar[str] = "finish"


@dataclass(frozen=True)
class Build(Request):
    """One native build: asked of the judge by the candidate's worker (its `load_cpp` or `load_inline`,
    mid-request, the protocol's one message from worker to judge), and of the control worker by the
    judge, which builds it there and keeps the artifact's hash (`judge.judge_builds`). `kind` is
    "lean-cpp" (`sources`: the one C++ source) or "load_inline" (`sources` the C++ ones,
    `cuda_sources`, `functions` as `load_inline` takes them)."""

    op: ClassVar[str] = "build"
    kind: str
    name: str
    sources: list[str]
    cuda_sources: list[str] = field(default_factory=list)
    functions: Any = None
    extra_cflags: list[str] = field(default_factory=list)
    extra_cuda_cflags: list[str] = field(default_factory=list)
    extra_ldflags: list[str] = field(default_factory=list)
    extra_include_paths: list[str] = field(default_factory=list)
    openmp: bool = True
    with_cuda: bool | None = None
    is_python_module: bool = True
    with_pytorch_error_handling: bool = True
    no_implicit_headers: bool = False


@dataclass(frozen=True)
class Shutdown(Request):
    """The last message: the worker ends (`sandbox.worker.serve`); it is not answered."""

    op: ClassVar[str] = "shutdown"


REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (
    Setup, Load, Drive, BuildReport, Construct, Call, Flush, Time, DeviceProfile, Seal, Finish, Build, Shutdown)}


def parse_request(raw: Any) -> Request:
    """The typed request a raw one stands for (`ProtocolError` when it is none)."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"a request must be an object, not {type(raw).__name__}")
    op = raw.get("op")
    if not isinstance(op, str) or op not in REQUESTS:
        raise ProtocolError(f"unknown request op {op!r}; the ops are {', '.join(REQUESTS)}")
    return REQUESTS[op].parse(raw)


def protocol_error_reply(exc: ProtocolError) -> dict[str, Any]:
    """The error reply to a malformed request: the worker answers it and goes on serving."""
    return {"raised": {"type": "ProtocolError", "message": str(exc)[:2000], "traceback_tail": ""}}


# ----- field checks ------------------------------------------------------------------------------
_Check = Callable[[Any], bool]
_CHECKS: dict[type, dict[str, tuple[_Check, str, bool]]] = {}


def _checks(cls: type) -> dict[str, tuple[_Check, str, bool]]:
    """Per field of `cls`: (its type's check, the type as written, whether the wire must carry it)."""
    found = _CHECKS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = {f.name: (_check(hints[f.name]), str(f.type),
                          f.default is MISSING and f.default_factory is MISSING) for f in fields(cls)}
        _CHECKS[cls] = found
    return found


def _check(hint: Any) -> _Check:
    """A check for one annotation of the kinds the messages use."""
    if hint is Any:
        return lambda v: True
    if hint is type(None):
        return lambda v: v is None
    if hint in (str, bool, int):
        return lambda v: type(v) is hint  # an int is no bool, a bool no int
    if hint is float:
        return lambda v: type(v) in (int, float)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [_check(a) for a in args]
        return lambda v: any(c(v) for c in options)
    if origin is list:
        item = _check(args[0]) if args else _check(Any)
        if args and args[0] is Any:
            return lambda v: type(v) is list
        return lambda v: type(v) is list and all(item(x) for x in v)
    if origin is dict:
        value = _check(args[1]) if args else _check(Any)
        return lambda v: type(v) is dict and all(type(k) is str and value(x) for k, x in v.items())
    if isinstance(hint, type):
        return lambda v: isinstance(v, hint)
    raise TypeError(f"no check for the annotation {hint!r}")


def _described(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


# ----- the worker's replies, as the judge reads them ---------------------------------------------
# Hostile data: a reply that is not what its request calls for is a `WorkerBroken`.


@dataclass(frozen=True)
class LoadReply:
    """The build report of a `load` (the fields the judge decides on; the rest it reads as it needs)."""

    compile: CompileRecord
    error: ErrorRecord | None

    @classmethod
    def parse(cls, raw: dict[str, Any], backend: str) -> LoadReply:
        try:
            record = from_plain(CompileRecord, raw["compile"])
            error = from_plain(ErrorRecord, raw["error"]) if raw.get("error") is not None else None
        except (KeyError, TypeError, ValueError) as exc:
            raise WorkerBroken(f"the build report is malformed: {exc}") from exc
        if record.backend != backend:
            raise WorkerBroken("the build report names another backend")
        return cls(record, error)


@dataclass(frozen=True)
class FinishReply:
    """What the worker's process-wide watches saw (`finish`): the fields every reply must carry in
    shape; the others (observed operators, opened libraries) are read by the checks that use them."""

    op_counts: dict[str, int]
    evidence: list[tuple[str, str]]
    launch_specs: list[Any]
    launch_problems: list[Any]

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> FinishReply:
        counts = raw.get("op_counts")
        if not isinstance(counts, dict) or not all(isinstance(k, str) and type(v) is int for k, v in counts.items()):
            raise WorkerBroken("the operator counts are malformed")
        evidence = evidence_items(raw.get("evidence", []))
        launches = {key: raw.get(key) for key in ("launch_specs", "launch_problems")}
        for key, value in launches.items():
            if not isinstance(value, list):
                raise WorkerBroken(f"{key} is malformed")
        return cls(counts, evidence, launches["launch_specs"], launches["launch_problems"])


@dataclass(frozen=True)
class CallReply:
    """A watched call's reply: its outputs (arena placeholders, for the judge to fill) and what the
    worker's watches saw."""

    output: Any
    evidence: list[tuple[str, str]]

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> CallReply:
        if "output" not in raw:
            raise WorkerBroken("a call's reply carries no output")
        return cls(raw["output"], evidence_items(raw.get("evidence", [])))


@dataclass(frozen=True)
class DryCallReply:
    """A dry call's reply: the Triton launches its host code recorded, and a note where it failed."""

    specs: list[dict[str, Any]]
    note: str

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> DryCallReply:
        specs, note = raw.get("specs"), raw.get("note")
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs) or not isinstance(note, str):
            raise WorkerBroken("a dry launch's reply is malformed")
        return cls(specs, note)


@dataclass(frozen=True)
class TimeReply:
    """A timed call's reply: the worker's own figures (non-negative, finite), its outputs when asked
    for, and what a timed call did that a checked one may not (`timed_rules`)."""

    device_us: float
    closed_us: float
    output: Any
    timed_rules: list[tuple[str, str]]

    @classmethod
    def parse(cls, raw: dict[str, Any], want_output: bool) -> TimeReply:
        if want_output and "output" not in raw:
            raise WorkerBroken("a timed call's reply carries no output")
        return cls(_sample_us(raw, "device_us"), _sample_us(raw, "closed_us"), raw.get("output"),
                   evidence_items(raw.get("timed_rules", [])))


def _sample_us(raw: dict[str, Any], key: str) -> float:
    value = raw.get(key)
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise WorkerBroken(f"timing sample {key}={value!r} is not a non-negative number")
    return float(value)
