"""Build failures caused by API drift: a call current torch removed or no longer accepts.

LLM-written KernelBench answers were learned from code written against older torch releases.
Their commonest failure under current headers is not a bug in the kernel but a call that has
gone: `AT_DISPATCH_FLOATING_TYPES(x.type(), ...)` (the dispatch macros take a `ScalarType` now,
and `Tensor::type()` returns a deprecated `DeprecatedTypeProperties`), `x.data<float>()`,
`AT_CHECK`, the THC headers. A repair prompt fixes these in one step when it is told the
replacement, so the verdict names it.

`explain(log, source)` reads a failed build's log and the sources it compiled, and returns one
note per drift it recognises: what went, and what to write instead. Each rule needs both the
compiler's complaint (so a build that failed for another reason is not misread) and the
construct in the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Drift:
    """One API that current torch removed or changed, and how to recognise a build it broke."""

    name: str
    in_log: re.Pattern[str]  # what the compiler says
    in_source: re.Pattern[str]  # the construct in the candidate's sources
    note: str  # what went and what to write instead


DRIFTS: tuple[Drift, ...] = (
    Drift("tensor_type_dispatch",
          re.compile(r"DeprecatedTypeProperties"),
          re.compile(r"AT_DISPATCH_\w+\s*\([^;]*?\.type\(\)", re.S),
          "`AT_DISPATCH_*(x.type(), ...)`: the dispatch macros take a ScalarType in current torch and "
          "`Tensor::type()` is deprecated (it returns DeprecatedTypeProperties); use `x.scalar_type()`, "
          "e.g. `AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"name\", [&] { ... })`"),
    Drift("tensor_type_scalar",
          re.compile(r"DeprecatedTypeProperties|scalarType"),
          re.compile(r"\.type\(\)\s*\.\s*scalarType\(\)"),
          "`x.type().scalarType()` is gone from current torch; use `x.scalar_type()`"),
    Drift("tensor_type_is_cuda",
          re.compile(r"DeprecatedTypeProperties|is_cuda"),
          re.compile(r"\.type\(\)\s*\.\s*is_cuda\(\)"),
          "`x.type().is_cuda()` is gone from current torch; use `x.is_cuda()` (or `x.device().is_cuda()`)"),
    Drift("tensor_data",
          re.compile(r"""has no member "data"|no member named ['‘]data['’]|'data' is not a member"""
                     r"""|no matching (member )?function for call to ['‘].*::data<"""),
          re.compile(r"\.data<\s*[\w:]+\s*>\s*\("),
          "`x.data<T>()` is gone from current torch; use `x.data_ptr<T>()`"),
    Drift("at_check",
          re.compile(r"""identifier "AT_CHECK" is undefined|['‘]AT_CHECK['’] was not declared"""),
          re.compile(r"\bAT_CHECK\s*\("),
          "`AT_CHECK` is gone from current torch; use `TORCH_CHECK(condition, message)`"),
    Drift("thc",
          re.compile(r"THC/THC\.h|THCState|THCudaCheck|THCCeilDiv"),
          re.compile(r"\bTHC\w*"),
          "the THC library (`THC/THC.h`, `THCudaCheck`, `THCState`) was removed from torch; use "
          "`C10_CUDA_CHECK(...)`, `at::cuda::getCurrentCUDAStream()` from <ATen/cuda/CUDAContext.h> and "
          "`at::ceil_div` from <ATen/ceil_div.h>"),
    Drift("old_std",
          re.compile(r"C\+\+17 or later|requires (at least )?C\+\+17|std=c\+\+1[14]"),
          re.compile(r"-std=c\+\+1[14]\b"),
          "the answer asks for `-std=c++11/14`, but current torch headers need C++17 or later (torch's own "
          "build passes `-std=c++20`); drop the flag"),
)

_STAGING = re.compile(r"\S*/\.staging-[^/\s]+/")  # the build folder: noise in a message
_ERROR_LINE = re.compile(r"(^|[:\s)])(fatal )?error\b", re.IGNORECASE)


def explain(log: str, source: str) -> list[str]:
    """One note per recognised drift, 'API drift: ...', in the order of DRIFTS."""
    return [f"API drift: {d.note}" for d in DRIFTS if d.in_log.search(log) and d.in_source.search(source)]


def has_construct(source: str) -> bool:
    """Whether `source` holds a construct of some drift: a build of it that fails is worth
    letting finish, since its log is what `explain` needs."""
    return any(d.in_source.search(source) for d in DRIFTS)


def first_error(log: str) -> str:
    """The first line of `log` that reports an error (the cause; the rest mostly follow from it),
    with the line after it when that one carries the detail (nvcc puts the offending code there)."""
    lines = [_STAGING.sub("", line) for line in log.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("$ ") or line.lstrip().startswith(("FAILED:", "ninja:")) or not _ERROR_LINE.search(line):
            continue
        if re.search(r"\berror\b\s*:?\s*$", line.strip(), re.IGNORECASE) and i + 1 < len(lines):
            return f"{line.strip()} {lines[i + 1].strip()}"[:500]
        return line.strip()[:500]
    return ""
