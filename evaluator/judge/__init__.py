"""The judge: the trusted side of an evaluation. It holds the seeds, the hidden shapes, the reference
and the verdict, and runs the stages (`pipeline`) over a candidate worker it drives through
`remote.WorkerClient`. Nothing here imports or runs candidate code, and nothing here imports
`worker/` (`tests/evaluator/test_layout.py`)."""
