"""The candidate's timed call starts with its inputs evicted, as the baselines' do: the worker
copies the inputs into its own buffers before the cache flush, not after it (a copy after the
flush leaves them warm in the cache; on a GPU every write goes through L2, so up to 50 MB of an
H100's inputs would start hot for the candidate and cold for eager and torch.compile).

Real parts: a spawned worker, the real wire and timing stage. The candidate only watches its own
process: it records the worker's input copies, flushes and its own calls, in order, to a file."""

from __future__ import annotations

import json
from pathlib import Path

from agentforge.evaluator.result import TimingConfig

from .worker_timing import time_in_worker

WATCHER = '''
import json
import torch
from torch import nn
import agentforge.evaluator.worker.candidate_side as side

LOG = {log!r}
events = []
_copy, _flush = side.Worker._arena_inputs, side.CacheFlusher.__call__

def copy(self, request):
    events.append("copy")
    return _copy(self, request)

def flush(self):
    events.append("flush")
    return _flush(self)

side.Worker._arena_inputs, side.CacheFlusher.__call__ = copy, flush

class ModelNew(nn.Module):
    def forward(self, x):
        events.append("call")
        with open(LOG, "w") as fh:
            json.dump(events, fh)
        return torch.relu(x)
'''


def test_the_inputs_are_copied_before_the_flush_of_every_timed_call(tmp_path: Path) -> None:
    # In the build cache's folder: the worker's own /tmp is private (sandbox separation), the
    # cache is bound back in.
    (tmp_path / "cache").mkdir(exist_ok=True)
    log = tmp_path / "cache" / "events.json"
    config = TimingConfig(warmup=1, min_reps=5, max_reps=5, flush_l2=True, recheck_fraction=0.0)
    time_in_worker(WATCHER.format(log=str(log)), tmp_path, config, "flush_order_candidate", seed=7)
    events = json.loads(log.read_text())
    timed = [i for i, e in enumerate(events) if e == "call" and i >= 2 and events[i - 1] == "flush"]
    assert len(timed) >= 5, events  # each timed call came straight after a flush...
    for i in timed:
        assert events[i - 2] == "copy", events[max(0, i - 4):i + 1]  # ...which came after its input copy
    assert ["flush", "copy", "call"] not in [events[i:i + 3] for i in range(len(events) - 2)], events
