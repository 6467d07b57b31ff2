"""The CPU smoke problem: a KernelBench-format task and the lean C++ skeleton a tiny policy fills."""
