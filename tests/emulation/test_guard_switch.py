"""guard_cost's children get the guard switch as a parameter (`--guard on|off`), and their entry sets
the process-wide variable that guarded_memory.h reads with getenv: nothing reads os.environ for it."""

from __future__ import annotations

import ctypes
import inspect

import pytest
from agentforge.evaluator.cuda_emulation import guard_cost


def _c_getenv(name: str) -> str | None:
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    value = libc.getenv(name.encode())
    return None if value is None else value.decode()


@pytest.mark.parametrize("inherited", [None, "off", "1234:7f00"])
def test_the_child_entry_sets_the_switch_the_header_reads(monkeypatch: pytest.MonkeyPatch,
                                                          inherited: str | None) -> None:
    if inherited is None:
        monkeypatch.delenv(guard_cost.GUARD_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(guard_cost.GUARD_VARIABLE, inherited)
    guard_cost.set_guard_switch(False)
    assert _c_getenv(guard_cost.GUARD_VARIABLE) == "off"
    guard_cost.set_guard_switch(True)  # an inherited "off" must not turn the guarded side off
    assert _c_getenv(guard_cost.GUARD_VARIABLE) is None


def test_the_measurement_reads_no_environment() -> None:
    assert "environ.get" not in inspect.getsource(guard_cost)
    assert "guard" in inspect.signature(guard_cost.child).parameters
