"""Build stage: execute the candidate module (its builds redirected to the cache) and find `ModelNew`.

Runs only inside the sandbox child: executing a candidate is running untrusted code.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from agentforge.evaluator import native
from agentforge.evaluator.result import CompileRecord, ErrorRecord
from agentforge.evaluator.worker.compile_only import CompileOnlyStop

LOG_TAIL_CHARS = 6000
_FIRST_ERROR = re.compile(r"(^|[:\s)])(fatal )?error\b", re.IGNORECASE)  # as the CLI's renderer reads them


def keep_first_error(log: str, limit: int = LOG_TAIL_CHARS) -> str:
    """A compiler log cut to `limit` characters that still holds its first error: with thousands
    of follow-on errors the cause is the first one, and a plain tail keeps only the last."""
    if len(log) <= limit:
        return log
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if not line.startswith("$ ") and _FIRST_ERROR.search(line)), None)
    if first is None:
        return log[-limit:]
    head = "\n".join(lines[max(0, first - 3):first + 6])[: limit // 3]
    tail = log[-(limit - len(head) - 80):]
    return f"{head}\n... [{len(log) - len(head) - len(tail)} characters of the log cut] ...\n{tail}"


@dataclass
class LoadOutcome:
    compile: CompileRecord
    module: ModuleType | None = None
    model_cls: type | None = None
    error: ErrorRecord | None = None
    compile_failed: bool = False
    stopped_for_compile_only: bool = False


def load_candidate(source: str, backend: str, compile_only: bool, arch: str, module_name: str) -> LoadOutcome:
    native.BUILD_EVENTS.clear()
    redirect = _lookalike(arch) if compile_only else native.load_inline_redirected()
    module = _new_module(module_name)
    stopped = False
    error: ErrorRecord | None = None
    build_failed = False
    try:
        code = compile(source, f"<candidate {module_name}>", "exec")
        with redirect:
            exec(code, vars(module))
    except CompileOnlyStop:
        stopped = True
    except native.BuildError as exc:
        build_failed = True
        error = ErrorRecord(type="BuildError", message=str(exc), traceback_tail=keep_first_error(exc.log))
    except SyntaxError as exc:
        build_failed = True
        error = ErrorRecord(type="SyntaxError", message=f"line {exc.lineno}: {exc.msg}")
    except BaseException as exc:
        # A torch builder failure surfaces as RuntimeError from inside load_inline.
        build_failed = any(not e.ok for e in native.BUILD_EVENTS)
        error = ErrorRecord(type=type(exc).__name__, message=str(exc)[:2000],
                            traceback_tail=_tail(traceback.format_exc()))
    # A build that failed is the verdict, also when the candidate caught its exception and went on.
    failure = _build_failure(native.BUILD_EVENTS)
    if failure is not None:
        build_failed, error = True, failure
    record = _compile_record(backend, ok=not build_failed, compile_only=compile_only, arch=arch)
    outcome = LoadOutcome(compile=record, module=module, error=error, compile_failed=build_failed,
                          stopped_for_compile_only=stopped)
    if error is None and not stopped:
        model_cls = vars(module).get("ModelNew")
        if not isinstance(model_cls, type):
            outcome.error = ErrorRecord(type="MissingModelNew", message="the candidate defines no class `ModelNew`")
        else:
            outcome.model_cls = model_cls
    return outcome


def _lookalike(arch: str) -> contextlib.AbstractContextManager[None]:
    from agentforge.evaluator.worker import cuda_lookalike

    return cuda_lookalike.active(arch)


def _build_failure(events: list[native.BuildEvent]) -> ErrorRecord | None:
    from agentforge.evaluator.worker import cuda_lookalike

    return cuda_lookalike.build_failure(events)


def _new_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = f"<candidate {name}>"
    sys.modules[name] = module  # so classes it defines pickle and torch.compile can trace them
    return module


def _compile_record(backend: str, ok: bool, compile_only: bool, arch: str) -> CompileRecord:
    events = native.BUILD_EVENTS
    log = "\n".join(e.log for e in events if e.log)
    paths = sorted({e.kind for e in events}) or ["python"]
    resources: tuple = ()
    histogram: dict[str, int] = {}
    if compile_only:
        resources, histogram = _resource_report(events, log)
    return CompileRecord(
        ok=ok, backend=backend, seconds=sum(e.seconds for e in events),
        cached=bool(events) and all(e.cached for e in events), path="+".join(paths),
        arch=arch if compile_only or backend == "cuda" else None,
        log_tail=keep_first_error(log) if not ok else log[-LOG_TAIL_CHARS:],
        resources=resources, sass_histogram=histogram,
    )


def _resource_report(events: list[native.BuildEvent], log: str) -> tuple[tuple, dict[str, int]]:
    """Registers, shared memory, spills (ptxas) and a SASS histogram, when the hardware
    module and tools are available; an empty report otherwise."""
    with contextlib.suppress(ImportError):
        from agentforge.evaluator.hardware import compile_report

        resources = tuple(compile_report.parse_ptxas(log))
        histogram: dict[str, int] = {}
        for event in events:
            cubin = event.sources.get("cubin")
            if event.ok and cubin:
                with contextlib.suppress(Exception):
                    for op, count in _sass_histogram(compile_report, Path(cubin)).items():
                        histogram[op] = histogram.get(op, 0) + count
        return resources, histogram
    return (), {}


def _sass_histogram(compile_report: ModuleType, cubin: Path) -> dict[str, int]:
    """The cubin's SASS histogram, kept beside it in the build cache: disassembling takes longer
    than the whole rest of a warm verdict."""
    kept = cubin.with_name(cubin.name + ".sass.json")
    with contextlib.suppress(OSError, ValueError):
        return {str(k): int(v) for k, v in json.loads(kept.read_text()).items()}
    histogram = dict(compile_report.sass_histogram(str(cubin)))
    with contextlib.suppress(OSError):
        kept.write_text(json.dumps(histogram))
    return histogram


def _tail(text: str) -> str:
    return text[-LOG_TAIL_CHARS:]
