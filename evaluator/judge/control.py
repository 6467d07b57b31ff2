"""The control worker: a second worker process, forked and set up as the candidate's is, that never
sees candidate code.

What an honest worker spends outside the timed windows (reading its inputs from the arena,
flushing the cache, the protocol around them) grows with the machine's load: on the 2-core VM it
was 1.4x what the same staging cost the judge's own thread when quiet, 4-6x under a loaded CI run,
so a bound taken from the judge's thread either flagged honest workers or let moved work through.
The control pays the same costs on the same machine at the same moment: the judge sends it a null
round trip on the same inputs beside each of the candidate's, and the candidate's outside windows
are held to what the control's cost (`stage_timing.outside_disagreement`).

It loads `CONTROL_SOURCE` (the judge's own, written here) through the worker's ordinary `load`, so
that it runs with the same watches installed (the operator observer, the tamper snapshot) and its
null round trips go through the same code as the candidate worker's. The candidate cannot reach it:
the guard refuses signals and tracing aimed at another process, and its CPU clock is its own.
"""

from __future__ import annotations

import torch
from agentforge.evaluator.judge.remote import RemoteModel, WorkerClient
from agentforge.evaluator.protocol.messages import CandidateRaised, Load, WorkerBroken

CONTROL_SOURCE = '''"""The control worker's module (the judge's, not a candidate's): only its nulls are timed."""
import torch


class ModelNew(torch.nn.Module):
    def forward(self, *inputs):
        return inputs[0]
'''


def load_control(client: WorkerClient, device: torch.device, backend: str) -> RemoteModel | None:
    """The control worker of `client`, loaded and ready for null round trips; None where it has none
    or it failed to load (it is dropped then, and the judge's replica bounds the outside windows)."""
    control = client.control
    if control is None:
        return None
    try:
        reply = control.send(Load(source=CONTROL_SOURCE, backend=backend, compile_only=False, arch="",
                                  device=str(device), module_name="agentforge_control"))
    except (WorkerBroken, CandidateRaised):
        client.drop_control()
        return None
    if reply.get("has_model") is not True:
        client.drop_control()
        return None
    return RemoteModel(control, "null", device)
