"""The integrity rules: each has a name, a one-line meaning, and evidence when it fires.

Static rules read the candidate's source (AST); dynamic rules turn the run-time evidence of
`guards` and `timing` into flags. Every rule here has an adversarial test in `tests/exploits/`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentforge.evaluator.result import Flag

RULES: dict[str, str] = {
    "torch_fallback": "ModelNew.forward dispatches PyTorch compute instead of its own kernel",
    "try_except_fallback": "a try/except around the kernel falls back to PyTorch",
    "reference_reuse": "ModelNew subclasses, builds or calls the reference Model",
    "input_mutation": "the candidate changed its inputs",
    "output_type": "an output is not a tensor",
    "lazy_output": "an output is a Tensor subclass or has no materialised storage",
    "output_aliases_input": "an output shares memory with an input",
    "nondeterministic_output": "two calls on the same inputs gave different results",
    "result_caching": "new input contents in the same buffers gave the old result",
    "timed_output_mismatch": "an output re-checked during timing was wrong",
    "background_work": "threads or processes started by the candidate outlive the call",
    "unsynchronized_work": "work still runs after forward returns (side stream, async launch)",
    "monkey_patch": "the candidate replaced functions of torch, the timer or the evaluator",
    "precision_switch": "the candidate changed process-wide precision switches (TF32, default dtype)",
    "forbidden_introspection": "the candidate inspects frames, the garbage collector or the harness",
    "dynamic_import": "the candidate imports modules by computed names (__import__, importlib), hiding what it uses",
    "library_fallback": "the candidate computes with another library (numpy, SciPy, JAX, BLAS, cuBLAS, cuDNN)",
    "fast_math": "the candidate turns on fast-math from its source (pragma, attribute, flag in a string)",
    "shape_specialised": "correct on some shapes but not on others: another declared variant, or a hidden shape "
                         "derived from them per evaluation (an audit mark on the kernelbench track)",
    "stale_weights": "ModelNew computes with its own initial weights, not the loaded ones (a copy made in "
                     "__init__ before load_state_dict): prepack in ModelNew.prepare_weights()",
    "precision_downgrade": "an fp32 task computed at lower precision (fp16, bf16, TF32 rounding): the error "
                           "against fp64 is far above eager fp32's on the same inputs",
    "l2_persistence": "the candidate set a persisting-L2 carve-out or access window",
    "below_speed_of_light": "measured time below the task's speed-of-light floor",
    "speedup_over_10x": "speedup over 10x: marked for a person's audit",
    "timing_disagreement": "the worker's timing samples are faster than the judge's clocks (wall, and the "
                           "worker's CPU time) allow",
    "thread_oversubscription": "the candidate computed on more CPU threads than it (and the baselines) was given",
    "observer_tampering": "the candidate touches what observes it: the dispatcher's switches and mode stack, the "
                          "profiler, tracing and audit hooks",
    "observer_blocked": "the worker blinded the judge's native sampler of it (made its memory map unreadable)",
    "refused_syscall": "the worker's seccomp filter killed it: a system call aimed at another process (signal, "
                       "priority, affinity, ptrace, memory) or a new process where none may start",
    "worker_unsealed": "the worker was not sealed before timing: a process of its own besides it was alive, or "
                       "its seal filter is missing",
}

# Calls that reach PyTorch compute from Python (for the static view of torch_fallback).
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
_INTROSPECTION = {"gc", "inspect", "traceback"}
_INTROSPECTION_CALLS = {"_getframe", "currentframe", "get_objects", "get_referrers", "settrace", "setprofile"}
_BACKGROUND = {"threading", "multiprocessing", "concurrent", "subprocess", "_thread", "asyncio"}
_PATCH_TARGETS = {"torch", "time", "builtins", "agentforge", "F", "nn", "sys", "os", "gc", "threading", "hashlib",
                  "random", "math", "ctypes", "importlib", "numpy"}
# Writing these attributes changes a function or object in place, past identity checks.
_DUNDER_PATCHES = {"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__dict__", "__class__", "__bases__",
                   "__call__", "__torch_function__", "__torch_dispatch__", "__getattribute__", "__getattr__"}
# The one part of the evaluator a candidate may import: the build helpers.
_ALLOWED_AGENTFORGE = ("agentforge.evaluator.native",)
_PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "spawnl", "spawnle", "spawnlp",
                  "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "execv", "execve", "execl", "execle",
                  "execlp", "execvp", "execvpe", "register_at_fork"}
_DYNAMIC_IMPORT_CALLS = {"__import__", "import_module", "find_spec", "module_from_spec", "exec_module", "load_module"}
_LIBRARY_MODULES = {"numpy", "scipy", "jax", "jaxlib", "tensorflow", "sklearn", "cupyx", "mkl", "onnxruntime"}
# Foreign-function doors whose library opens and symbol lookups raise no audit event: what they call
# is seen by nothing at run time.
_UNAUDITED_FFI = {"cffi", "_cffi_backend"}
# ctypes' handles on the interpreter's own C API: native calls that can rewrite the harness.
_INTERPRETER_API = {"pythonapi", "PyDLL", "pydll"}
# In C/C++ sources: run-time library opens and symbol lookups (a door to any library's routines
# under a name the source never spells), and calls into the interpreter's C API.
_NATIVE_LOOKUP_TEXT = re.compile(r"\b(dlopen|dlsym|dlvsym|dlmopen|dl_iterate_phdr|RTLD_[A-Z]+)\b")
_C_API_TEXT = re.compile(r"\b_?Py[A-Z][A-Za-z]*_[A-Za-z]\w*\s*\(")
_C_API_SYMBOL = re.compile(r"^_?Py[A-Z]")
# In string constants (C/C++/CUDA sources, flag lists): library calls and fast-math switches.
_LIBRARY_TEXT = re.compile(r"\b(cblas_\w+|cublas\w*|cublasLt\w*|cudnn\w*|openblas|mkl_\w+|dnnl\w*|oneDNN|libblas|"
                           r"liblapack)", re.IGNORECASE)
_FAST_MATH_TEXT = re.compile(r"(fast[-_]math|-Ofast|unsafe-math-optimizations|associative-math|reciprocal-math|"
                             r"finite-math-only|prec-div\s*=\s*(false|0)|prec-sqrt\s*=\s*(false|0)|"
                             r"#\s*pragma\s+GCC\s+optimize|__attribute__\s*\(\(\s*optimize|"
                             r"#\s*pragma\s+clang\s+fp\s+(reassociate|contract\s*\(\s*fast))", re.IGNORECASE)
_INTROSPECTION_ATTRS = {"f_back", "f_locals", "f_globals", "gi_frame", "tb_frame", "cr_frame",
                        "__subclasses__", "__globals__", "__closure__", "__code__", "__builtins__"}
# What `native` keeps for the evaluator: the build records and the flag policy.
_BUILD_INTERNALS = {"BUILD_EVENTS", "BuildEvent", "FORBIDDEN_FLAGS", "DEFAULT_CXX_FLAGS", "_check_flags",
                    "build_cache", "load_inline_redirected"}
# The macro compilers define under fast math: testing it (`#ifdef __FAST_MATH__ #error ...`) is a
# guard that proves the switch is off, not a switch.
_FAST_MATH_MACRO = re.compile(r"\b__FAST_MATH__\b")
# Libraries a candidate may not open from its process (`ctypes`), nor link its own builds against:
# their routines are the work it was asked to write.
_NATIVE_LIBRARY = re.compile(r"(blas|lapack|cublas|cudnn|dnnl|onednn|mkl|libtorch|libc10|cusparse|cufft)",
                             re.IGNORECASE)
# Linking against torch is what every extension does; linking against a BLAS or cuDNN is not.
_LINKED_LIBRARY = re.compile(r"(blas|lapack|cublas|cudnn|dnnl|onednn|mkl|cusparse|cufft)", re.IGNORECASE)
_NATIVE_SYMBOL = re.compile(r"(cblas_|lapacke_|cublas|cudnn|mkl_|dnnl_|(^|_)[sdcz](gemm|gemv|symm|syrk|trsm|trmm|"
                            r"axpy|dot|scal|ger)(_?64)?_?$|^_ZN2at|^_ZN3c10|^_ZN5torch)", re.IGNORECASE)
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
# Parts of torch that observe a candidate or decide what it runs under: the dispatcher's keys, guards
# and thread-local sets, the Python dispatch and function-mode stacks, the profiler and RecordFunction.
# A name under torch (or a string that names one) matching this is a switch on the observer.
_OBSERVER_TEXT = re.compile(r"(dispatch|profil|record_?function|kineto|mode_stack|function_?mode|_push_mode|"
                            r"_pop_mode|_set_torch_function|_itt\b|observer)", re.IGNORECASE)
# Hooks of the interpreter that see (or hide) every call: sys/threading tracing and profiling, audit.
_INTERPRETER_HOOKS = {"setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads", "addaudithook",
                      "monitoring", "_setprofileallthreads", "_settraceallthreads"}
# A string constant that looks like a name (no spaces: not a C++ source) can be looked up with getattr;
# one naming (part of) the dispatcher, a mode stack or the profiler is a lookup of the observer.
_NAME_LIKE = re.compile(r"[A-Za-z_][\w.]{0,100}")
_OBSERVER_STRING = re.compile(r"(dispatch|profiler|record_?function|kineto|mode_stack|function_?mode)", re.IGNORECASE)


@dataclass(frozen=True)
class StaticFinding:
    rule: str
    evidence: str


def flag(rule: str, evidence: str, severity: str = "reject") -> Flag:
    if rule not in RULES:
        raise KeyError(f"unknown integrity rule {rule!r}")
    return Flag(rule=rule, evidence=evidence, severity=severity)


def static_findings(source: str) -> list[StaticFinding]:
    """AST checks of the candidate module."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases = _import_aliases(tree)
    findings: list[StaticFinding] = []
    findings += _reference_reuse(tree)
    findings += _try_except_fallback(tree)
    findings += _imports(tree)
    findings += _patching(tree, aliases)
    findings += _calls(tree, aliases)
    findings += _strings(tree)
    findings += _observer_tampering(tree, aliases)
    return findings


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the top-level module it stands for (`import torch.nn as tnn` maps tnn to torch,
    `from agentforge.evaluator import compare` maps compare to agentforge)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                aliases[a.asname or a.name] = node.module.split(".")[0]
    return aliases


def _resolved_root(node: ast.AST, aliases: dict[str, str]) -> str | None:
    root = _root_name(node)
    return aliases.get(root, root) if root is not None else None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Call):
        return _root_name(node.func)
    return node.id if isinstance(node, ast.Name) else None


def _reference_reuse(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id == "Model":
                    found.append(StaticFinding("reference_reuse", "class ModelNew(Model) subclasses the reference"))
        if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} refers to the reference `Model`"))
        if isinstance(node, ast.ImportFrom) and any(a.name == "Model" for a in node.names):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} imports a `Model`"))
        if isinstance(node, ast.Attribute) and node.attr == "Model" and isinstance(node.ctx, ast.Load):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} reads `.Model` from another module"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "Model"):
            found.append(StaticFinding("reference_reuse", f"line {node.lineno} looks up `Model` by name"))
    return _dedupe(found)


def _try_except_fallback(tree: ast.Module) -> list[StaticFinding]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        for handler in node.handlers:
            for inner in ast.walk(handler):
                if isinstance(inner, ast.Call) and _root_name(inner.func) in _TORCH_ROOTS:
                    found.append(StaticFinding(
                        "try_except_fallback",
                        f"line {handler.lineno}: an except handler calls {ast.unparse(inner.func)}",
                    ))
                    break
    return _dedupe(found)


def _imports(tree: ast.Module) -> list[StaticFinding]:
    sys_aliases = _import_aliases(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module.split(".")[0]]
        for name in names:
            if name in _INTROSPECTION:
                found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} imports {name}"))
            if name in _BACKGROUND:
                found.append(StaticFinding("background_work", f"line {node.lineno} imports {name}"))
            if name in _LIBRARY_MODULES:
                found.append(StaticFinding("library_fallback", f"line {node.lineno} imports {name}"))
            if name in _UNAUDITED_FFI:
                found.append(StaticFinding("library_fallback", f"line {node.lineno} imports {name}, a foreign-function "
                                                               "door whose opens and lookups nothing sees at run time"))
        for full in _imported_modules(node):
            if full.split(".")[0] == "agentforge" and not full.startswith(_ALLOWED_AGENTFORGE):
                found.append(StaticFinding("forbidden_introspection",
                                           f"line {node.lineno} imports the harness ({full})"))
            if full == "importlib":
                found.append(StaticFinding("dynamic_import", f"line {node.lineno} imports importlib"))
        if isinstance(node, ast.Attribute) and node.attr in _INTROSPECTION_CALLS:
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} uses .{node.attr}"))
        if isinstance(node, ast.Attribute) and node.attr in _INTROSPECTION_ATTRS:
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} uses .{node.attr}"))
        if (isinstance(node, ast.Attribute) and node.attr == "modules"
                and _resolved_root(node.value, sys_aliases) == "sys"):  # not nn.Module.modules()
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} reads sys.modules"))
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in _BUILD_INTERNALS:
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} touches the build's {name}"))
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name in _BUILD_INTERNALS for a in node.names):
            found.append(StaticFinding("forbidden_introspection", f"line {node.lineno} imports the build's internals"))
    return _dedupe(found)


def _imported_modules(node: ast.AST) -> list[str]:
    """Full dotted names a statement imports (`from a.b import c` gives a.b and a.b.c)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return []


def _calls(tree: ast.Module, aliases: dict[str, str]) -> list[StaticFinding]:
    """Processes started through `os`, imports by computed name, tensors handed to numpy."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        root = _resolved_root(func, aliases) if isinstance(func, ast.Attribute) else None
        if name in _PROCESS_CALLS and root in ("os", "pty"):
            found.append(StaticFinding("background_work", f"line {node.lineno} calls {ast.unparse(func)}"))
        if name in _DYNAMIC_IMPORT_CALLS:
            found.append(StaticFinding("dynamic_import", f"line {node.lineno} calls {ast.unparse(func)}"))
        if name == "numpy" and isinstance(func, ast.Attribute) and not node.args:
            found.append(StaticFinding("library_fallback", f"line {node.lineno} hands a tensor to numpy "
                                                           f"({ast.unparse(func)})"))
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr") and len(node.args) >= 2:
            attr = node.args[1]
            if isinstance(attr, ast.Constant) and attr.value in ("__import__", "_getframe", "get_objects"):
                found.append(StaticFinding("dynamic_import" if attr.value == "__import__" else
                                           "forbidden_introspection", f"line {node.lineno} looks up {attr.value}"))
    return _dedupe(found)


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for an attribute chain (calls in it kept as their callee), else ''."""
    parts = []
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Call):
            node = node.func
            continue
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _observer_tampering(tree: ast.Module, aliases: dict[str, str]) -> list[StaticFinding]:
    """A class, not a spelling: any name under torch that names the dispatcher, a mode stack or the
    profiler (attribute chains, imports, `from torch... import`); any lookup under torch by a computed
    name; any string that names such a part; the interpreter's tracing, profiling and audit hooks, and
    its C API through ctypes (`pythonapi`, `PyDLL`)."""
    found = []

    def hit(node: ast.AST, what: str) -> None:
        found.append(StaticFinding("observer_tampering", f"line {getattr(node, 'lineno', '?')} {what}"))

    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # report whole chains only
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            root = _resolved_root(node, aliases)
            chain = _dotted(node)
            # torch._C as a value (bound to a name, passed on) is a handle a computed lookup can use later
            torch_part = root == "torch" and (_OBSERVER_TEXT.search(chain) or node.attr == "_C")
            hook = root in ("sys", "threading", "_thread") and bool(_INTERPRETER_HOOKS & set(chain.split(".")))
            api = root == "ctypes" and bool(_INTERPRETER_API & set(chain.split(".")))
            if torch_part or hook or api:
                hit(node, f"touches {chain}")
        for full in _imported_modules(node):
            if full.split(".")[0] == "torch" and _OBSERVER_TEXT.search(full):
                hit(node, f"imports {full}")
            last = full.rsplit(".", 1)[-1]
            if ((full.split(".")[0] in ("sys", "threading") and last in _INTERPRETER_HOOKS)
                    or (full.split(".")[0] == "ctypes" and last in _INTERPRETER_API)):
                hit(node, f"imports {full}")
        named = isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAME_LIKE.fullmatch(node.value)
        if named and (_OBSERVER_STRING.search(node.value) or node.value in _INTERPRETER_HOOKS):
            hit(node, f"names {node.value!r}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars")
                and node.args and _resolved_root(node.args[0], aliases) == "torch"):
            name = node.args[1] if len(node.args) > 1 else None
            if node.func.id == "vars" or not isinstance(name, ast.Constant):
                hit(node, f"looks inside {ast.unparse(node.args[0])} by a computed name")
    return _dedupe(found)


def _strings(tree: ast.Module) -> list[StaticFinding]:
    """String constants (the C/C++/CUDA sources and flag lists), comments stripped: BLAS/cuBLAS/cuDNN
    calls and fast-math switches set from inside the source, where the build's flag check cannot see them."""
    found = []
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue  # a bare string statement (a docstring) is prose, never compiled
        text = _C_COMMENT.sub("", node.value)
        library = _LIBRARY_TEXT.search(text)
        if library:
            found.append(StaticFinding("library_fallback", f"line {node.lineno}: a string names {library.group(0)}"))
        fast = _FAST_MATH_TEXT.search(_FAST_MATH_MACRO.sub("", text))
        if fast:
            found.append(StaticFinding("fast_math", f"line {node.lineno}: a string sets {fast.group(0)!r}"))
        found += [StaticFinding(rule, f"line {node.lineno}: {what}") for rule, what in _native_doors(text)]
    return _dedupe(found)


def _native_doors(text: str) -> list[tuple[str, str]]:
    """(rule, what) for run-time symbol lookups and interpreter C-API calls in a C/C++ source."""
    doors = []
    lookup = _NATIVE_LOOKUP_TEXT.search(text)
    if lookup:
        doors.append(("library_fallback", f"the source resolves libraries or symbols at run time ({lookup.group(1)})"))
    api = _C_API_TEXT.search(text)
    if api:
        doors.append(("observer_tampering", f"the source calls the interpreter's C API ({api.group(0).rstrip('( ')})"))
    internal = _TORCH_INTERNAL_TEXT.search(text)
    if internal:
        doors.append(("torch_fallback", f"the source calls torch's internal kernels ({internal.group(0)}), which "
                      "dispatch no operator any observer sees"))
    return doors


# torch's own kernels reached below the dispatcher: `at::native::` functions, their dispatch stubs
# (`add_stub`, `DispatchStub`, `REGISTER_DISPATCH`) and the `at::_ops` / `at::cpu::` entry points
# (`at::cuda::` is left alone: honest kernels ask it for the current stream).
# A direct call dispatches no operator, and stayed under the native sampler's statistical floor.
_TORCH_INTERNAL_TEXT = re.compile(r"\bat\s*::\s*(native|_ops|cpu)\s*::\s*\w+|\bDispatchStub\b|"
                                  r"\bREGISTER_(ARCH_)?DISPATCH\b|\b\w+_stub\s*(\(|::)")


def _patching(tree: ast.Module, aliases: dict[str, str] | None = None) -> list[StaticFinding]:
    aliases = aliases or {}
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for target in targets:
            if isinstance(target, ast.Subscript) and _is_namespace(target.value):
                found.append(StaticFinding("monkey_patch",
                                           f"line {node.lineno} writes into {ast.unparse(target.value)}"))
                continue
            if not isinstance(target, ast.Attribute):
                continue
            if _resolved_root(target, aliases) in _PATCH_TARGETS or target.attr in _DUNDER_PATCHES:
                found.append(StaticFinding("monkey_patch", f"line {node.lineno} assigns {ast.unparse(target)}"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        if node.func.id in ("setattr", "delattr"):
            owner = _resolved_root(node.args[0], aliases)
            attr = node.args[1] if len(node.args) > 1 else None
            dunder = isinstance(attr, ast.Constant) and attr.value in _DUNDER_PATCHES
            if owner in _PATCH_TARGETS or dunder or not isinstance(attr, ast.Constant):
                found.append(StaticFinding("monkey_patch",
                                           f"line {node.lineno} calls {node.func.id} on {ast.unparse(node.args[0])}"))
    return _dedupe(found)


def native_findings(opened: Iterable[str], symbols: Iterable[tuple[str, str]], needed: dict[str, list[str]],
                    own: str = "", mapped: Iterable[str] = (), written: Iterable[str] = ()) -> list[StaticFinding]:
    """`library_fallback` from what the worker's audit hook saw candidate code do through `ctypes`
    (libraries opened, symbols resolved; names assembled at run time included), from what the
    libraries it opened link against (`needed`: read from their ELF headers by the judge), and from
    the libraries mapped into the worker after its setup (`mapped`: read by the judge from
    /proc/PID/maps, whatever opened them: cffi, or the loader called from native code), and from
    the files mapped as code there that the worker wrote itself where the judge builds its code
    (`written`: `WorkerClient.code_it_wrote`; no honest candidate runs code no build rule read)."""
    found = []
    for path in written:
        what = "a file it removed since mapping it" if path.endswith(" (deleted)") else "a file it wrote itself"
        found.append(StaticFinding("library_fallback", f"the worker runs {path} as code: {what}, not a build of "
                                                       "the judge's (read by the judge from /proc)"))
    for path in mapped:
        if _LINKED_LIBRARY.search(path.rsplit("/", 1)[-1]):
            found.append(StaticFinding("library_fallback", f"the worker mapped {path} after its setup (read by the "
                                                           "judge from /proc)"))
    for name in opened:
        if _NATIVE_LIBRARY.search(name.rsplit("/", 1)[-1]):
            found.append(StaticFinding("library_fallback", f"opened the library {name} through ctypes"))
    for library, name in symbols:
        if _NATIVE_SYMBOL.search(name) and not (own and library.startswith(own)):  # its own build may say sgemm
            found.append(StaticFinding("library_fallback", f"resolved the symbol {name} through ctypes"))
        if _C_API_SYMBOL.match(name):
            found.append(StaticFinding("observer_tampering", f"resolved the interpreter's C API {name} through ctypes"))
    for library, deps in needed.items():
        bad = [d for d in deps if _LINKED_LIBRARY.search(d)]
        if bad:
            found.append(StaticFinding("library_fallback", f"{library} links against {', '.join(bad)}"))
    return _dedupe(found)


def build_findings(events: Iterable[Any]) -> list[StaticFinding]:
    """Fast-math and library calls in what was actually built: each build's flags and sources as the
    compiler got them (catches flags and pragmas assembled at run time, which the AST cannot read)."""
    found = []
    for event in events:
        flags = " ".join(f for f in getattr(event, "flags", ()) if f != "|")
        for text, what in [(flags, "flags"), *((src, f"{kind} source") for kind, src in
                                                 getattr(event, "sources", {}).items() if kind != "cubin")]:
            text = _C_COMMENT.sub("", text or "")
            fast = _FAST_MATH_TEXT.search(_FAST_MATH_MACRO.sub("", text))
            if fast:
                found.append(StaticFinding("fast_math", f"build {event.name}: {what} set {fast.group(0)!r}"))
            library = _LIBRARY_TEXT.search(text)
            if library:
                found.append(StaticFinding("library_fallback", f"build {event.name}: {what} name {library.group(0)}"))
            if what != "flags":
                found += [StaticFinding(rule, f"build {event.name}: {door}") for rule, door in _native_doors(text)]
    return _dedupe(found)


def _is_namespace(node: ast.AST) -> bool:
    """`vars(x)`, `globals()`, `x.__dict__`: writing into these replaces attributes without an assignment."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("vars", "globals"):
        return bool(node.args) or node.func.id == "globals"
    return isinstance(node, ast.Attribute) and node.attr == "__dict__"


def _dedupe(findings: list[StaticFinding]) -> list[StaticFinding]:
    seen: dict[str, StaticFinding] = {}
    for f in findings:
        seen.setdefault(f.rule + f.evidence, f)
    return list(seen.values())


# The judge's native sampling of the worker (`native_sampler`): what its counts must show to flag.
NATIVE_MIN_SAMPLES = 5  # fewer samples than this decide nothing
NATIVE_LIBRARY_SHARE = 0.10  # BLAS/LAPACK/oneDNN/MKL share of the candidate's compute samples
NATIVE_OWN_FLOOR = 0.5  # the candidate's own code's least share of (own + torch beyond the null)
NATIVE_Z = 3.0  # standard deviations of torch samples beyond the null calls' that decide
_COMPUTE_KINDS = ("own", "torch", "blas", "jit")


def native_sampling_findings(report: dict[str, Any], own_floor: float = NATIVE_OWN_FLOOR,
                             allowed: Iterable[str] = ()) -> tuple[list[StaticFinding], dict[str, Any]]:
    """Flags and profiling coverage from the judge's samples of the worker's instruction pointers.

    `library_fallback`: BLAS/LAPACK/oneDNN/MKL code (a file of that name: numpy's bundled OpenBLAS,
    libmkl, libdnnl) ran in the candidate's correctness or timed calls, at least NATIVE_MIN_SAMPLES
    and NATIVE_LIBRARY_SHARE of their compute samples (the harness itself never calls a BLAS).
    `torch_fallback`: in the timed calls, torch's libraries and JIT code beyond what the null calls
    of the judge's clock show per request (the harness's own copies), at least twice NATIVE_MIN_SAMPLES
    and NATIVE_Z standard deviations, while the candidate's own builds have under `own_floor` of own + that
    excess. `observer_blocked`: the worker's memory map became unreadable to the judge after its
    setup. `allowed`: kinds the task permits ("blas", "torch")."""
    if not report.get("available"):
        return [], {"available": False, "why": str(report.get("why", ""))[:300]}
    samples = report.get("samples", {})
    requests = report.get("requests", {})

    def count(phase: str, *kinds: str) -> int:
        got = samples.get(phase, {})
        return sum(int(got.get(k, 0)) for k in kinds)

    found: list[StaticFinding] = []
    unreadable, denied = int(report.get("unreadable", 0)), int(report.get("map_denied", 0))
    if unreadable >= 3 or denied:
        found.append(StaticFinding("observer_blocked", f"the worker's memory map became unreadable to the judge after "
                                   f"its setup ({denied} reads refused, {unreadable} samples unnamed): it made itself "
                                   "not dumpable"))
    compute = count("call", *_COMPUTE_KINDS) + count("timed", *_COMPUTE_KINDS)
    blas = count("call", "blas") + count("timed", "blas")
    if "blas" not in allowed and blas >= NATIVE_MIN_SAMPLES and blas >= NATIVE_LIBRARY_SHARE * compute:
        found.append(StaticFinding("library_fallback", f"{blas} of {compute} compute samples of the candidate's calls "
                                   "ran in a BLAS/LAPACK/oneDNN/MKL library (the judge's native sampler): "
                                   + _top_files(report, ("blas", "lapack", "mkl", "dnnl"))))
    other = count("call", "other") + count("timed", "other")
    if (report.get("own_by") == "judge_builds" and other >= NATIVE_MIN_SAMPLES
            and other >= NATIVE_LIBRARY_SHARE * (compute + other)):
        found.append(StaticFinding("library_fallback", f"{other} of {compute + other} compute samples of the "
                                   "candidate's calls ran in code the judge did not build (the judge's native "
                                   "sampler; its builds are known by their content's hash): "
                                   + _other_files(report)))
    timed, nulls = int(requests.get("timed", 0)), int(requests.get("null", 0))
    torch_timed = count("timed", "torch", "jit")
    expected = count("null", "torch", "jit") * timed / nulls if nulls else 0.0
    excess = torch_timed - expected
    own = count("timed", "own")
    # Profiling coverage: the candidate's own share of the timed calls' compute beyond the harness's.
    denominator = own + max(excess, 0.0) + count("timed", "blas")
    coverage = own / denominator if denominator > 0 else None
    # Under no fallback both counts are Poisson at the harness's one rate per request (pooled here): the
    # excess then has variance rate x timed x (1 + timed / nulls); flagged beyond NATIVE_Z of it.
    rate = (torch_timed + count("null", "torch", "jit")) / (timed + nulls) if timed + nulls else 0.0
    spread = (rate * timed * (1 + timed / nulls)) ** 0.5 if nulls else 0.0
    if ("torch" not in allowed and nulls and excess >= max(2 * NATIVE_MIN_SAMPLES, NATIVE_Z * spread)
            and own < own_floor * (own + excess)):
        found.append(StaticFinding("torch_fallback", f"the judge's native sampler found the timed calls in torch's "
                                   f"libraries: {torch_timed} samples over {timed} calls against {expected:.1f} "
                                   f"expected from the null calls (sd {spread:.1f}), and {own} in the candidate's own "
                                   f"builds (floor {own_floor:.0%})"))
    summary = {"available": True, "coverage_timed": None if coverage is None else round(coverage, 3),
               "own_timed": own, "torch_timed_beyond_null": round(excess, 1), "blas_in_calls": blas,
               "own_floor": own_floor}
    return found, summary


def _other_files(report: dict[str, Any]) -> str:
    files = report.get("other_files", {})
    named = [f"{path} x{n}" for path, n in files.items() if isinstance(path, str)] if isinstance(files, dict) else []
    return ", ".join(named[:3]) or "no file named"


def _top_files(report: dict[str, Any], parts: tuple[str, ...]) -> str:
    """The most sampled files whose name has one of `parts`, or that the judge identified by their
    content as a BLAS (a renamed copy: `library_identity`), with what they are."""
    files = report.get("files", {})
    identified = report.get("identified", {})
    names = []
    for path, n in files.items():
        if not isinstance(path, str):
            continue
        found = identified.get(path) if isinstance(identified, dict) else None
        if isinstance(found, dict) and found.get("kind") == "blas":
            names.append(f"{path} x{n}, named by its content: {str(found.get('what', ''))[:200]}")
        elif any(x in path.rsplit("/", 1)[-1].lower() for x in parts):
            names.append(f"{path.rsplit('/', 1)[-1]} x{n}")
    return ", ".join(names[:3]) or "no file named"
