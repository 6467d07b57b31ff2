"""The source rewrite that turns CUDA C++ into host C++ for the emulation runtime.

What the preprocessor cannot do is done here, on the text, before compiling: a launch
`kernel<<<grid, block, smem, stream>>>(args)` becomes `::emu::launch(grid, block, smem, stream,
[&](auto&... a) { kernel(a...); }, args)`; each `__global__` function starts with its
`__launch_bounds__` check; `extern __shared__ T name[];` becomes a pointer to the launch's dynamic
shared memory; torch's device checks name the CPU (`x.is_cuda()` -> `x.is_cpu()`, `kCUDA` ->
`kCPU`), so the candidate's own checks accept the CPU tensors it is handed; each `__shared__`
variable becomes a reference to its slot in the launch's guarded static shared window. Constructs that only a
GPU can execute (inline PTX, tensor-core fragments, asynchronous copies, clusters) are named in a
`NeedsGpu` error. Line breaks are kept, so compiler messages point at the candidate's lines.
"""

from __future__ import annotations

import re

GPU_ONLY = [  # (pattern on comment-free source, the construct as the verdict names it)
    (r"\basm\s*(volatile\s*)?\(|\b__asm__\b", "inline PTX (asm)"),
    (r"\bwmma::|<mma\.h>|\bnvcuda::", "tensor-core fragments (wmma)"),
    (r"\bwgmma\b", "warpgroup MMA (wgmma)"),
    (r"\bmma\.sync\b|\bldmatrix\b", "tensor-core MMA (mma.sync / ldmatrix PTX)"),
    (r"\bcp\.async\b|__pipeline_memcpy_async|\bmemcpy_async\b|<cuda/pipeline>|<cuda/barrier>|\bcuda::pipeline\b",
     "asynchronous copies (cp.async / memcpy_async)"),
    (r"\bCUtensorMap\b|cuTensorMapEncode|cp\.async\.bulk", "the Tensor Memory Accelerator (TMA)"),
    (r"__cluster_dims__|\bcluster_group\b|this_cluster\s*\(|cudaLaunchAttributeClusterDimension",
     "thread-block clusters"),
    (r"\b__nv_fp8_|<cuda_fp8\.h>", "FP8 types (cuda_fp8.h)"),
]


class NeedsGpu(Exception):
    """The source uses a construct that cannot execute in the CPU emulation."""

    def __init__(self, construct: str, line: int):
        super().__init__(f"{construct} at line {line}: executing it needs a GPU (the CPU emulation cannot run it)")
        self.construct, self.line = construct, line


class RewriteError(Exception):
    """A launch or a kernel the rewrite could not parse."""


def strip_comments(text: str) -> str:
    """The text with // and /* */ comments blanked (line breaks kept), strings and chars intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def gpu_only_construct(text: str) -> NeedsGpu | None:
    """The first GPU-only construct in the (comment-free) source, if any."""
    found = []
    for pattern, name in GPU_ONLY:
        match = re.search(pattern, text)
        if match:
            found.append((match.start(), name))
    if not found:
        return None
    start, name = min(found)
    return NeedsGpu(name, text.count("\n", 0, start) + 1)


def _match(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise RewriteError(f"unbalanced {open_!r} at offset {start}")


def _split_top(text: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i])
            last = i
            last += 1
    parts.append(text[last:])
    return [p.strip() for p in parts]


def _kernel_start(text: str, end: int) -> int:
    """Where the kernel expression before `<<<` at `end` starts (name, `::`, template arguments)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    while True:
        if i > 0 and text[i - 1] == ">":
            depth = 0
            while i > 0:
                i -= 1
                depth += {">": 1, "<": -1}.get(text[i], 0)
                if depth == 0:
                    break
            while i > 0 and text[i - 1].isspace():
                i -= 1
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
            j -= 1
        if j == i:
            raise RewriteError("a launch without a kernel name before <<<")
        i = j
        if text[max(0, i - 2):i] == "::":
            i -= 2
            continue
        return i


# Anything that makes a CUDA thread wait for others (or that may hide such a call: a header of the
# candidate's own); a module whose sources hold none of these runs its threads as plain calls.
SYNCHRONISING = re.compile(r"__syncthreads|__syncwarp|_sync\s*\(|__shfl|__ballot|__any|__all|__match|__reduce_|"
                           r"cooperative_groups|\bcg::|\.sync\s*\(|this_thread_block|tiled_partition|"
                           r"coalesced_threads|#\s*include\s*\"")


def needs_fibers(sources: list[str]) -> bool:
    """Whether any source (comments aside) may make threads wait for each other."""
    return any(SYNCHRONISING.search(strip_comments(s)) for s in sources)


def rewrite_launches(text: str, plain: bool = False) -> str:
    """Each `<<<...>>>` launch as a launcher call (`emu::launch<true>`: the barrier-free fast path)."""
    launcher = "::emu::launch<true>" if plain else "::emu::launch"
    out, pos = [], 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            return "".join(out) + text[pos:]
        start = _kernel_start(text, at)
        close = text.find(">>>", at)
        if close < 0:
            raise RewriteError(f"<<< without >>> at line {text.count(chr(10), 0, at) + 1}")
        config = _split_top(text[at + 3:close])
        if not 2 <= len(config) <= 4:
            raise RewriteError(f"a launch needs 2 to 4 configuration values, got {len(config)}")
        config += ["0", "nullptr"][len(config) - 2:]
        paren = close + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            raise RewriteError("a launch without its argument list")
        end = _match(text, paren, "(", ")")
        args = text[paren + 1:end - 1].strip()
        kernel = text[start:at].strip()
        call = (f"{launcher}({config[0]}, {config[1]}, (size_t)({config[2]}), (cudaStream_t)({config[3]}), "
                f"[&](auto&... afemu_a) {{ {kernel}(afemu_a...); }}{', ' + args if args else ''})")
        out.append(text[pos:start] + call + "\n" * text.count("\n", start, end))
        pos = end


def rewrite_kernels(text: str) -> str:
    """Each `__global__` body starts with its `__launch_bounds__` check."""
    out, pos = [], 0
    for match in re.finditer(r"\b__global__\b", text):
        if match.start() < pos:
            continue
        i, bounds = match.end(), None
        while True:
            paren = text.find("(", i)
            if paren < 0:
                break
            word = re.search(r"(\w+)\s*$", text[i:paren])
            end = _match(text, paren, "(", ")")
            if word and word.group(1) in ("__launch_bounds__", "__align__", "alignas", "__attribute__"):
                if word.group(1) == "__launch_bounds__":
                    bounds = text[paren + 1:end - 1]
                i = end
                continue
            body = re.match(r"[^;{]*\{", text[end:])
            if body is None or not bounds:
                break
            brace = end + body.end()
            out.append(text[pos:brace] + f" if (::emu::launch_bounds_exceeded({bounds})) return; ")
            pos = brace
            break
    return "".join(out) + text[pos:]


def _depth(text: str, at: int) -> int:
    return text.count("{", 0, at) - text.count("}", 0, at)


def rewrite_dynamic_shared(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        kind = re.sub(r"__align__\s*\(\s*\w+\s*\)|alignas\s*\(\s*\w+\s*\)", "", match.group(1)).strip()
        name = match.group(2)
        if _depth(text, match.start()) > 0:
            return f"{kind}* {name} = reinterpret_cast<{kind}*>(::emu::dynamic_smem());"
        return f"\n#define {name} (reinterpret_cast<{kind}*>(::emu::dynamic_smem()))\n"

    return re.sub(r"\bextern\s+__shared__\s+([^;\[]*?)\s*\b(\w+)\s*\[\s*\]\s*;", replace, text)


_ALIGN = re.compile(r"__align__\s*\(([^()]*)\)|alignas\s*\(([^()]*)\)")


def _shared_declarators(declaration: str) -> tuple[str, list[tuple[str, str, str]]]:
    """The base type of a `__shared__` declaration and its declarators as (prefix, name, suffix):
    `float *p, q[4]` gives ("float", [("*", "p", ""), ("", "q", "[4]")])."""
    parts, depth, angle, last = [], 0, 0, 0
    for i, c in enumerate(declaration):  # commas outside brackets and template arguments
        depth += (c in "([{") - (c in ")]}")
        if depth == 0:
            angle += (c == "<") - (c == ">")
            if c == "," and angle == 0:
                parts.append(declaration[last:i])
                last = i + 1
    parts.append(declaration[last:])
    first = parts[0].split("=")[0]
    head = first.split("[")[0]
    name = re.search(r"([A-Za-z_]\w*)\s*$", head)
    if name is None:
        raise RewriteError(f"a __shared__ declaration without a name: {declaration.strip()[:80]}")
    spec = head[:name.start()]
    base = spec.rstrip(" \t\n*&")
    declarators = [(spec[len(base):].strip(), name.group(1), first[len(head):].strip())]
    for part in parts[1:]:
        part = part.split("=")[0]
        found = re.match(r"\s*([*&\s]*)([A-Za-z_]\w*)\s*(.*)$", part, re.S)
        if found is None:
            raise RewriteError(f"a __shared__ declarator the rewrite cannot read: {part.strip()[:80]}")
        declarators.append((found.group(1).strip(), found.group(2), found.group(3).strip()))
    return base, declarators


def guard_static_shared(text: str) -> str:
    """Each `__shared__` variable in a function body becomes a reference to its slot in the launch's
    static shared window (`emu::static_shared`), which lies against guard pages: an access outside the
    block's window faults, as on a GPU, and every block starts with the window filled with 0xFF bytes
    (NaN for floats), so a read of shared memory no thread of the block wrote shows. Namespace-scope
    `__shared__` variables stay plain statics."""
    def replace(match: re.Match[str]) -> str:
        if _depth(text, match.start()) == 0:
            return match.group(0)
        declaration = match.group(1)
        align = _ALIGN.search(declaration)
        align_expr = (align.group(1) or align.group(2)) if align else "0"
        base, declarators = _shared_declarators(_ALIGN.sub(" ", declaration))
        out = []
        for prefix, name, suffix in declarators:
            out.append(f"static char afemu_sk_{name}; using afemu_st_{name} = {base} {prefix} {suffix}; "
                       f"afemu_st_{name}& {name} = ::emu::static_shared<afemu_st_{name}>(&afemu_sk_{name}, "
                       f"(size_t)({align_expr}));")
        return " ".join(out) + "\n" * match.group(0).count("\n")

    return re.sub(r"(?<!extern )\b__shared__\s+([^;{}]*?);", replace, text)


TORCH_DEVICE = [
    (r"\.is_cuda\(\)", ".is_cpu()"),
    (r"\bkCUDA\b", "kCPU"),
    (r"\bDeviceType::CUDA\b", "DeviceType::CPU"),
    (r"\.cuda\(\)", ".cpu()"),
]


def rewrite(source: str, plain: bool = False) -> str:
    """CUDA C++ (or a host wrapper) as host C++ for the emulation runtime; raises NeedsGpu. `plain`:
    the module has no synchronising call (`needs_fibers`), its launches take the fast path."""
    text = strip_comments(source)
    problem = gpu_only_construct(text)
    if problem is not None:
        raise problem
    text = re.sub(r"\bstatic\s+__shared__\b", "__shared__", text)
    text = rewrite_dynamic_shared(text)
    text = guard_static_shared(text)
    text = rewrite_kernels(text)
    text = rewrite_launches(text, plain)
    for pattern, replacement in TORCH_DEVICE:
        text = re.sub(pattern, replacement, text)
    return text
