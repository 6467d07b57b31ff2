"""Fixtures for provider tests: the scripted loopback server module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_scripted_server() -> ModuleType:
    name = "agentforge_tests_scripted_server"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name("scripted_server.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def scripted() -> ModuleType:
    return load_scripted_server()
