"""The shipped reference kernel's measured speedup, read from its record, for the reward's top tier.

The evaluator times eager and torch.compile beside a candidate, not the shipped kernel. So the
"beats the reference kernel" tier compares ratios: the candidate's speedup vs eager (timed now)
against the reference kernel's speedup vs eager in its `record.json`, measured on the same kind
of device (the kernel library's slug: `cpu`, `h100`, ...) and the same shape variant. A record
for another device, another shape, an unaccepted or unmeasured kernel gives nothing, and the
tier stays out of reach rather than compare unlike things. Where the record names the CPU model
it was measured on and `device_name` is given, the two must match too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RecordedReference:
    speedup: float  # the reference kernel's eager / kernel time at `shape`, from its record
    record: str  # the record file it came from
    device: str  # the kernel library's device slug (cpu, h100, ...)
    shape: str

    @property
    def source(self) -> str:
        """How the reward knew it: `record:<path>#<shape>` (see RewardRecord.reference)."""
        return f"record:{self.record}#{self.shape}"


def recorded_reference(task_name: str, backend: str, device: str, shape: str, device_name: str | None = None,
                       root: Path | None = None) -> RecordedReference | None:
    """The shipped kernel's recorded speedup for this task, backend, device slug and shape, if any."""
    from agentforge.kernel_library import find_kernel

    kernel = find_kernel(task_name, backend, device, root)
    if kernel is None or kernel.gpu != device or not kernel.record:
        return None
    record = kernel.record
    if not record.get("measured", False):
        return None
    machine = record.get("machine") or {}
    if device_name and machine.get("device") and machine["device"] != device_name:
        return None
    speedup = _shape_speedup(record, shape)
    if speedup is None:
        return None
    return RecordedReference(speedup, _display(kernel.path / "record.json"), device, shape)


def this_device(device: str) -> tuple[str, str]:
    """(slug, name) of the device this process would evaluate on: `cpu` and the CPU model, or
    the GPU's slug and name."""
    from agentforge.kernel_library import gpu_slug

    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        name = torch.cuda.get_device_name(index)
        return gpu_slug(name), name
    import torch
    from agentforge.evaluator.device_state import device_info

    return "cpu", device_info(torch.device("cpu")).name


def _shape_speedup(record: dict[str, Any], shape: str) -> float | None:
    per_shape = (record.get("summary") or {}).get("per_shape") or {}
    entry = per_shape.get(shape) or {}
    speedup = entry.get("speedup")
    if not entry.get("accepted") or not isinstance(speedup, int | float) or speedup <= 0:
        return None
    return float(speedup)


def _display(path: Path) -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)
