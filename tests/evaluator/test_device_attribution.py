"""Device-kernel attribution (`evaluator/device_attribution.py`): whose kernels the device ran during the
timed calls on CUDA, and the profiling coverage in the verdict.

Without a GPU the real profiler records no CUDA kernel, so the attribution logic is tested on kernel
lists in the shape the worker sends (names as kineto writes them: `__cxa_demangle`d signatures, bare
names for `extern "C"` and Triton kernels, `Memcpy ...`/`Memset ...` for the runtime's copies), against
a real shared object built here with g++ and read by the real ELF reader. The `gpu` tests run the whole
path on a CUDA device and skip cleanly without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from agentforge.evaluator import device_attribution as da
from agentforge.evaluator.result import EvalResult, Stage, Status, TimingRecord, TimingStats, from_plain, to_plain

from agentforge.task import Task, TaskLoadError

ROOT = Path(__file__).resolve().parents[2]

# What nvcc's host side leaves in a candidate's shared object: a function of each kernel's own mangled
# name (the launch stub). Here: a template kernel, one in an anonymous namespace, an `extern "C"` one,
# a plain one with a GEMM-like name, and two decoys that borrow a library kernel's name.
OWN_SOURCE = r"""
template <typename T> void relu_kernel(const T* x, T* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }
template void relu_kernel<float>(const float*, float*, long);
namespace { __attribute__((used)) void scale_kernel(float* y, long n) { y[n] = 0; } }
extern "C" void add_kernel(const float* a, const float* b, float* c, long n) { c[n] = a[n] + b[n]; }
void gemm_tiled(const float* a, const float* b, float* c, int m, int n, int k) { c[m] = a[n] * b[k]; }
void ampere_sgemm_128x64_nn(float* c) { c[0] = 1; }
namespace at { namespace native { void vectorized_elementwise_kernel(int n, float* y) { y[n] = 0; } } }
"""

RELU = "void relu_kernel<float>(float const*, float*, long)"
TORCH_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
TORCH_RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
              "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
              "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() "
              "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
              "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
              "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() "
              "const::{lambda(float)#1}, at::detail::Array<char*, 2>)")
TORCH_REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<"
                "float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
                "{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, "
                "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()("
                "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)")
CUBLAS_SGEMM = "ampere_sgemm_128x64_nn"
CUBLAS_NVJET = "nvjet_tst_192x192_64x4_2x1_v_bz_coopA_TNN"
CUBLAS_GEMV = ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
               "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
               "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >("
               "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
               "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, "
               "float, float)")
CUDNN = "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x64x32_stage5"
INDUCTOR = "triton_poi_fused_relu_0"
COPY = "Memcpy DtoD (Device -> Device)"


@pytest.fixture(scope="module")
def own_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    folder = tmp_path_factory.mktemp("own_build")
    (folder / "kernels.cpp").write_text(OWN_SOURCE)
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", "-o", str(folder / "kernels.so"), str(folder / "kernels.cpp")],
                   check=True, capture_output=True)
    return folder / "kernels.so"


def k(name: str, us: float, count: int = 5) -> da.Kernel:
    return da.Kernel(name, us, count)


def test_the_elf_reader_finds_what_the_build_defines(own_so: Path) -> None:
    defined = da.elf_defined_functions(own_so)
    assert "add_kernel" in defined and "_Z11relu_kernelIfEvPKT_PS0_l" in defined
    assert any(s.startswith("_ZN12_GLOBAL__N_1") and "scale_kernel" in s for s in defined)  # a local symbol
    assert not any("memcpy" in s for s in defined)  # undefined imports are not the build's own
    assert da.elf_defined_functions(own_so.with_suffix(".cpp")) == []  # not an ELF file
    assert da.elf_defined_functions(own_so.parent / "missing.so") == []


def test_kernels_are_attributed_to_the_candidates_builds_and_the_libraries(own_so: Path) -> None:
    own = da.own_symbols([own_so])
    origins = {name: da.classify(name, own, set()) for name in (
        RELU, "(anonymous namespace)::scale_kernel(float*, long)", "add_kernel",
        "gemm_tiled(float const*, float const*, float*, int, int, int)",
        TORCH_FILL, TORCH_RELU, TORCH_REDUCE, CUBLAS_SGEMM, CUBLAS_NVJET, CUBLAS_GEMV, CUDNN, INDUCTOR, COPY,
        "void relu_kernel<double>(double const*, double*, long)", "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>"
        "(cutlass_80_tensorop_s1688gemm::Params)", "mystery_kernel")}
    assert origins == {
        RELU: "own", "(anonymous namespace)::scale_kernel(float*, long)": "own", "add_kernel": "own",
        # Own build first for a generic name: an honest GEMM may be called anything.
        "gemm_tiled(float const*, float const*, float*, int, int, int)": "own",
        # Library names win over an own symbol of the same name (the decoys in OWN_SOURCE).
        TORCH_FILL: "torch", TORCH_RELU: "torch", TORCH_REDUCE: "torch", CUBLAS_SGEMM: "cublas",
        CUBLAS_NVJET: "cublas", CUBLAS_GEMV: "cublas", CUDNN: "cudnn", INDUCTOR: "triton-torch", COPY: "runtime",
        # Another instantiation than the one built is not the build's.
        "void relu_kernel<double>(double const*, double*, long)": "other",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(cutlass_80_tensorop_s1688gemm::Params)": "cutlass",
        "mystery_kernel": "other"}


def test_kernels_named_in_the_source_are_own_without_a_shared_object() -> None:
    """Triton (and NVRTC or CuPy) kernels leave no shared object: the source names them."""
    source = '''
import triton
import triton.language as tl
CUDA = r"""
__global__ void __launch_bounds__(256) softmax_rows(const float* x, float* y, int n) {}
extern "C" __global__ void scale_rows(float* y) {}
"""
@triton.autotune(configs=[], key=["n"])
@triton.jit
def add_kernel(x, y, n, BLOCK: tl.constexpr):
    pass
def helper():
    pass
'''
    names = da.own_source_kernels(source)
    assert names == {"add_kernel", "softmax_rows", "scale_rows"}
    assert da.classify("add_kernel", set(), names) == "own"
    assert da.classify("add_kernel_0d1d2de", set(), names) == "own"  # older Triton's specialisation suffix
    assert da.classify("void softmax_rows<256>(float const*, float*, int)", set(), names) == "own"
    assert da.classify("helper", set(), names) == "other"
    assert da.classify(INDUCTOR, set(), names | {INDUCTOR}) == "triton-torch"  # inductor's names stay torch's


def test_coverage_and_the_floor(own_so: Path) -> None:
    own = da.own_symbols([own_so])
    honest = da.attribute([k(RELU, 40.0), k(TORCH_FILL, 2.0), k(COPY, 1.0)], 5, own, set())
    assert honest.coverage == pytest.approx(40 / 43) and da.evidence(honest) is None
    assert honest.by_origin == {"own": 40.0, "torch": 2.0, "runtime": 1.0}
    assert honest.kernels[0] == (RELU, "own", 40.0, 5)
    # A decoy: the own kernel runs on a sliver, torch and cuBLAS do the work.
    sliver = da.attribute([k(RELU, 1.0), k(TORCH_REDUCE, 30.0), k(CUBLAS_NVJET, 60.0)], 5, own, set())
    found = da.evidence(sliver)
    assert sliver.coverage == pytest.approx(1 / 91) and found is not None
    assert "1.1%" in found and "cublas 66%" in found and "torch 33%" in found and "nvjet" in found
    # All torch, the floor a task may lower, and nothing on the device at all.
    fallback = da.attribute([k(TORCH_RELU, 12.0)], 5, own, set())
    assert fallback.coverage == 0.0 and da.evidence(fallback) is not None
    lenient = da.attribute([k(RELU, 1.0), k(TORCH_REDUCE, 3.0)], 5, own, set(), floor=0.2)
    assert lenient.coverage == 0.25 and da.evidence(lenient) is None
    idle = da.attribute([], 5, own, set())
    assert idle.coverage is None and da.evidence(idle) is None and "no device time" in da.describe(idle)
    assert "profiling coverage 93.0%" in da.describe(honest)


def test_the_record_travels_in_the_verdict() -> None:
    record = da.attribute([k(RELU, 4.0), k(TORCH_FILL, 1.0)], 5, da.keys(RELU), set())
    stats = TimingStats(median_us=1.0, mean_us=1.0, stdev_us=0.0, min_us=1.0, max_us=1.0, n=3, rel_stderr=0.0)
    timing = TimingRecord(shape="default", method="cuda-events", candidate=stats, device_attribution=record)
    again = from_plain(TimingRecord, to_plain(timing))
    assert again.device_attribution == record
    verdict = EvalResult(task_name="t", candidate_hash="h", backend="cuda", status=Status.OK, stage=Stage.DONE,
                         timing=timing)
    assert from_plain(EvalResult, to_plain(verdict)).timing == timing


def test_the_workers_reply_is_read_as_hostile_data() -> None:
    kernels, calls, problem = da.parse_reply({"kernels": [[RELU, 4.5, 5]], "calls": 5, "problem": ""})
    assert kernels == [da.Kernel(RELU, 4.5, 5)] and calls == 5 and problem == ""
    for bad in ({"kernels": [[RELU, float("nan"), 5]], "calls": 5}, {"kernels": [[RELU, -1.0, 5]], "calls": 5},
                {"kernels": [[RELU, 1.0]], "calls": 5}, {"kernels": "x", "calls": 5},
                {"kernels": [[RELU, 1.0, 1]] * (da.MAX_KERNELS + 1), "calls": 5},
                {"kernels": [], "calls": 0}, {"kernels": [], "calls": 5, "problem": 7}):
        with pytest.raises(ValueError):
            da.parse_reply(bad)
    # The worker's side caps what it sends: the smallest kernels are summed into one entry.
    totals = da.kernel_totals([(f"k{i}", float(i)) for i in range(da.MAX_KERNELS + 50)])
    assert len(totals) == da.MAX_KERNELS and totals[-1][0] == "(more kernels)"
    assert sum(t[1] for t in totals) == sum(range(da.MAX_KERNELS + 50))


def test_the_floor_is_the_tasks_and_a_bad_one_is_refused() -> None:
    base = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
           "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"
    assert da.floor_for(Task("t", base)) == da.DEFAULT_FLOOR
    assert da.floor_for(Task("t", base + "PROFILING_COVERAGE_FLOOR = 0.2\n")) == 0.2
    for bad in ("1.5", "'high'", "True"):
        with pytest.raises(TaskLoadError, match="PROFILING_COVERAGE_FLOOR"):
            Task("t", base + f"PROFILING_COVERAGE_FLOOR = {bad}\n")


def test_only_shared_objects_of_the_build_cache_are_the_candidates(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "torch_extensions" / "ext").mkdir(parents=True)
    own = cache / "torch_extensions" / "ext" / "ext.so"
    own.write_bytes(b"")
    mapped = [str(own), "/usr/lib/x86_64-linux-gnu/libcublas.so.12", str(tmp_path / "cache-other" / "x.so")]
    assert da.own_builds(mapped, cache) == [str(own)]


# ----- on a GPU -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_a_shipped_cuda_kernel_covers_its_device_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100 reference ReLU through the real pipeline: the verdict carries its profiling coverage."""
    from agentforge.evaluator.api import make_job
    from agentforge.evaluator.judge.pipeline import run_pipeline
    from agentforge.evaluator.result import Measure, TimingConfig
    from agentforge.sandbox.worker import launch_worker

    from agentforge.candidate import Candidate
    from agentforge.task import load_task

    monkeypatch.chdir(tmp_path)
    source = (ROOT / "results" / "kernels" / "h100" / "level1" / "relu" / "kernel.py").read_text()
    job = make_job(load_task("level1/relu"), Candidate(source, backend="cuda"), device="cuda",
                   measure=Measure(timing=True, baselines=("eager",)),
                   timing=TimingConfig(warmup=3, min_reps=10, max_reps=20, time_cap_s=2.0))
    result = run_pipeline(job, launch_worker)
    assert result.accepted and not result.rejecting_flags, result.summary()
    shares = result.timing.device_attribution
    assert shares is not None and shares.calls == da.REPS, result.timing.notes
    assert shares.coverage is not None and shares.coverage >= 0.9, shares
    assert shares.kernels[0][1] == "own" and "relu" in shares.kernels[0][0], shares


@pytest.mark.gpu
def test_a_torch_fallback_has_no_coverage(tmp_path: Path) -> None:
    """The corpus's plain torch fallback, driven in a real worker: the device ran only torch's kernel.
    (The pipeline rejects it earlier from its aten ops; here the device attribution alone decides.)"""
    from agentforge.evaluator.judge.stage_correctness import build_remote
    from agentforge.sandbox.worker import launch_worker

    source = (ROOT / "tests" / "exploits" / "cases" / "torch_fallback_plain.py").read_text()
    task = Task("elementwise_relu", (ROOT / "tests" / "exploits" / "tasks" / "elementwise_relu.py").read_text())
    device = torch.device("cuda")
    cache = tmp_path / "cache"
    client = launch_worker()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(cache), cpu_threads=1, device="cuda", torch_switches=True)
        loaded = client.request("load", source=source, backend="cuda", compile_only=False, arch="sm_90a",
                                device="cuda", interpret=False, module_name="attribution_fallback_candidate")
        assert loaded["has_model"], loaded
        _, candidate = build_remote(task, client, "default", 1234, device)
        shares = da.judge(candidate, task.make_inputs(7, "default", device), task, source, cache)
    finally:
        client.close()
    assert shares.coverage == 0.0 and shares.by_origin.get("torch", 0) > 0, shares
    assert da.evidence(shares) is not None
