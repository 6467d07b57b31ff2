"""verl backend (cluster training): a custom score function over the same reward service.

Nothing here imports verl: `score.py` is loaded by verl from its file path
(`reward.custom_reward_function.path`), `dataset.py` writes verl's parquet rows, and
`preflight.py` checks that the Ray cluster offers the evaluation resource before training. verl pins
versions of transformers and torch that conflict with the default install, so it lives in its
own environment (docs/rl.md, "verl on a cluster"); the default install and CI never import it.
"""
