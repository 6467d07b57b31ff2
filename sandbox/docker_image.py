"""Build the docker backend's evaluation image from this installation's own sources.

    python -m agentforge.sandbox.docker_image --tag agentforge-eval:latest [--base IMAGE] [--torch cpu|none]

The context is staged in memory: `sandbox/docker/Dockerfile` and the `agentforge` package laid out
as it installs (evaluator/ and sandbox/ inside it), without caches, so the daemon never receives
the repository's virtual environment or data.
"""

from __future__ import annotations

import argparse
import io
import tarfile
from pathlib import Path
from typing import Any

DOCKERFILE = Path(__file__).with_name("docker") / "Dockerfile"
_SKIP = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def _package_dirs() -> dict[str, Path]:
    """Where each part of the `agentforge` package lives here -> where it goes in the image."""
    import agentforge.evaluator
    import agentforge.sandbox

    import agentforge

    return {
        "agentforge": Path(agentforge.__file__).parent,
        "agentforge/evaluator": Path(agentforge.evaluator.__file__).parent,
        "agentforge/sandbox": Path(agentforge.sandbox.__file__).parent,
    }


def build_context() -> bytes:
    """A tar of the Dockerfile and the package, ready for the docker build API."""
    buffer = io.BytesIO()
    dirs = _package_dirs()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(DOCKERFILE, arcname="Dockerfile")
        for target, source in dirs.items():
            for path in sorted(source.rglob("*")):
                rel = path.relative_to(source)
                if any(part in _SKIP for part in rel.parts) or path.is_dir():
                    continue
                # a mapped subpackage is added from its own folder, not twice
                if target == "agentforge" and rel.parts[0] in ("evaluator", "sandbox", "rl"):
                    continue
                tar.add(path, arcname=f"{target}/{rel}", recursive=False)
    return buffer.getvalue()


def build_image(client: Any, tag: str, base: str = "python:3.11-slim", torch: str = "cpu") -> Any:
    """Build and tag the image with the docker SDK `client`; returns the image."""
    image, _logs = client.images.build(
        fileobj=io.BytesIO(build_context()), custom_context=True, tag=tag, rm=True,
        buildargs={"BASE": base, "TORCH": torch},
    )
    return image


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agentforge.sandbox.docker_image", description=__doc__)
    parser.add_argument("--tag", default="agentforge-eval:latest")
    parser.add_argument("--base", default="python:3.11-slim")
    parser.add_argument("--torch", choices=("cpu", "none"), default="cpu")
    args = parser.parse_args(argv)
    from agentforge.sandbox.config import SandboxConfig
    from agentforge.sandbox.docker_backend import docker_client

    image = build_image(docker_client(SandboxConfig(kind="docker")), args.tag, args.base, args.torch)
    print(f"built {args.tag} ({image.id})")


if __name__ == "__main__":
    main()
