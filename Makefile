# Two commands a new user needs: `make demo` (the main job) and `make test` (the suite).
# Each creates its own virtual environment when it is missing.

VENV ?= .venv
PY := $(VENV)/bin/python
# With a GPU, PyPI's default torch (a CUDA build); without one, the pinned CPU build. Elsewhere
# on a CPU-only machine, add TORCH_ARGS="--index-url https://download.pytorch.org/whl/cpu".
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo "torch>=2.4" || echo "torch==2.13.0")
TORCH_ARGS ?=
PYTEST_ARGS ?=
# A level-2 fusion: a residual add and RMSNorm that eager PyTorch runs as about eight passes
# over fp32 intermediates and the reference kernel as one, so fusion pays on a CPU core too.
DEMO_TASK ?= level2/add_rms_norm
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
# Without a GPU: the CPU backend on the task's `cpu` shape (its default there; the default shapes
# are GPU-sized), fewer timed repetitions, and no torch.compile baseline (minutes to build on CPU).
# With one: fewer repetitions and torch.compile's default mode only (max-autotune would tune again
# in every evaluation's fresh sandbox, minutes each), to keep the demo within 5 minutes.
DEMO_ARGS ?= $(if $(HAS_GPU),--backend cuda --quick,--backend cpu --quick --no-compile-baseline)
DEMO_ROUNDS ?= 3

# A second environment with a CUDA build of torch (no GPU needed): the tests marked `cuda_build`
# run the GPU path's real load_inline builds in it (nvcc, linked against libtorch_cuda, imported),
# which a CPU-only torch cannot link. Made by `make test` where nvcc is installed. Its interpreter
# is the system's python3 where there is one, so the sandbox user (uid 65534) can run it too.
CUDA_VENV ?= .venv-cuda
TORCH_CUDA_SPEC ?= torch==2.14.1
CUDA_VENV_PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
HAS_NVCC := $(shell command -v nvcc >/dev/null 2>&1 || test -x /usr/local/cuda/bin/nvcc && echo yes)

.PHONY: setup system-deps test test-fast lint demo clean gpu-check cuda-venv

$(VENV)/.installed: pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_SPEC) $(TORCH_ARGS)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

$(CUDA_VENV)/.installed: pyproject.toml setup.py
	test -x $(CUDA_VENV)/bin/python || $(CUDA_VENV_PYTHON) -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install -q $(TORCH_CUDA_SPEC) numpy
	$(CUDA_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

cuda-venv: $(CUDA_VENV)/.installed

# Optional system tools some tests use (bubblewrap for the sandbox, PostgreSQL for the store);
# installed when we are root with apt, otherwise those tests skip and say why.
system-deps:
	@bash scripts/system-deps.sh

lint: setup
	$(VENV)/bin/ruff check .

# Two workers (pytest-xdist), a test file each at a time: most tests wait on a process (a sandbox
# child, a compiler, a server) more than they compute, so two keep both cores busy. TEST_WORKERS=0
# runs in this process, one test at a time.
TEST_WORKERS ?= 2
test: setup system-deps lint $(if $(HAS_NVCC),cuda-venv)
	$(VENV)/bin/pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# The inner loop: every module's unit tests, within 3 minutes on 2 cores. It leaves out what only
# `make test` runs: tests that start a process (`process`: sandbox children, the CLI, compilers,
# servers) or run long (`slow`), both listed in tests/tiers.txt, the `journey`s, the `cuda_build`
# tests, and those that need a GPU, docker or PostgreSQL. --refuse-processes fails a test here that
# starts a process without being listed, so the tier stays fast as tests are added.
FAST_MARKERS ?= not slow and not process and not journey and not cuda_build and not gpu and not docker and not postgres
test-fast: setup
	$(VENV)/bin/pytest -m "$(FAST_MARKERS)" --refuse-processes $(PYTEST_ARGS)

# Without a GPU the CPU's ceilings are measured first (about 6 s, on the one thread the evaluator
# pins), so that the summary can say how close the best kernel came to the roofline.
demo: setup
	@$(if $(HAS_GPU),true,echo "measuring this CPU's bandwidth and FLOP/s on one thread, for the roofline..." && \
		$(VENV)/bin/agentforge gpu --device cpu --measure --json > /dev/null)
	$(VENV)/bin/agentforge optimize $(DEMO_TASK) --provider library --max-rounds $(DEMO_ROUNDS) $(DEMO_ARGS)

# Proves the GPU path on a GPU machine (doctor, timing fidelity, sandbox, profile, gpu tests,
# reference kernels), resumable across calls of 10 minutes; without a GPU it prints its plan.
# Needs no network and no `make setup`: a bare GPU image's python3 holds torch. OUT=DIR copies the
# state and reports there. Where nvidia-smi is, the .venv's python only when its torch has CUDA (a
# carried CPU-only .venv would measure nothing), else python3; gpu-check itself refuses, exit 2, a
# torch that cannot use the GPU nvidia-smi sees.
GPU_CHECK_PY ?= $(if $(HAS_GPU),$(shell test -x $(PY) && $(PY) -c 'import sys, torch; sys.exit(torch.version.cuda is None)' >/dev/null 2>&1 && echo $(PY) || echo python3),$(shell test -x $(PY) && echo $(PY) || echo python3))
GPU_CHECK_ARGS ?=
gpu-check:
	$(GPU_CHECK_PY) scripts/gpu_check.py $(if $(OUT),--out $(OUT)) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) $(CUDA_VENV) runs .pytest_cache .ruff_cache
