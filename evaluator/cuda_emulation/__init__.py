"""CUDA C++ executed on the CPU, for correctness without a GPU (see docs/cuda-emulation.md).

`rewrite` (the source rewrite), `build` (the CPU extension), `environment` (the candidate worker's
CUDA-looking machine) run in the candidate worker; `judge` is the pipeline's side. Importing the
package imports none of them.
"""
