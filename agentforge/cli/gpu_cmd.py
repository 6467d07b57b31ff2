"""`agentforge gpu`: what the device at hand is, and its measured ceilings.

`agentforge gpu` prints the spec (the CUDA GPU if torch sees one, and the CPU) with the ceilings a
roofline will use; `--measure` measures bandwidth and GEMM throughput and records them for this
machine (`<cache_dir>/ceilings/<device>.json`; on the CPU `<cpu>-<threads>t.json`, measured on the
threads the evaluator pins, 1 unless `--threads` says otherwise); `--json` prints the same as one
JSON object.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("gpu")
    def gpu(
        measure: bool = typer.Option(False, "--measure", help="measure bandwidth and GEMM throughput and "
                                     "record them as this machine's ceilings"),
        json_output: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
        device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N, or auto (cuda if visible)"),
        cache_dir: str | None = typer.Option(None, "--cache-dir", help="where ceilings are recorded "
                                             "(default: the cache_dir setting, ~/.cache/agentforge)"),
        config: str | None = typer.Option(None, "--config", help="settings file (TOML)"),
        threads: int | None = typer.Option(None, "--threads", min=1, help="CPU only: the threads to measure "
                                           "on (default: the evaluator's, 1); a roofline uses the ceilings "
                                           "of the thread count its evaluation ran on"),
    ) -> None:
        """Show the GPU (or CPU) spec and roofline ceilings; --measure records measured ones."""
        import json

        from agentforge.cli.common import build_settings, console, err_console

        settings = build_settings(config, cache_dir=cache_dir)
        report = _gather(device, measure, settings.cache_dir, threads)
        if "error" in report:
            err_console.print(f"[red]gpu:[/red] {report['error']}")
            raise typer.Exit(2)
        if json_output:
            typer.echo(json.dumps(report, indent=2))
        else:
            _print(report, console)


def _gather(device: str, measure: bool, cache_dir: str, threads: int | None = None) -> dict:
    """Spec and ceilings of the chosen device as plain data; an "error" key when it cannot be had."""
    import torch

    from agentforge.evaluator.hardware.ceilings import load_ceilings, measure_ceilings
    from agentforge.evaluator.hardware.specs import probe_cpu, probe_gpu

    cuda = torch.cuda.is_available()
    if device == "auto":
        device = "cuda" if cuda else "cpu"
    if device.startswith("cuda") and not cuda:
        return {"error": "no CUDA GPU is visible to torch; use --device cpu"}
    index = int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0
    gpu_spec = probe_gpu(index) if cuda else None
    if device == "cpu":
        from agentforge.evaluator.hardware.ceilings import evaluator_threads

        threads = threads or evaluator_threads()
    else:
        threads = None
    try:
        ceilings = (measure_ceilings(device, cache_dir=cache_dir, threads=threads) if measure
                    else load_ceilings(device, cache_dir=cache_dir, threads=threads))
    except (RuntimeError, ValueError, OSError) as exc:
        return {"error": str(exc)}
    return {
        "device": device,
        "cuda_available": cuda,
        "gpu": gpu_spec.to_dict() if gpu_spec else None,
        "cpu": probe_cpu().to_dict(),
        "ceilings": ceilings.to_dict(),
        "measured": measure,
        "threads": threads,
    }


def _print(report: dict, console) -> None:
    from rich.table import Table

    def fmt(value) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k} {v:g}" for k, v in value.items())
        if isinstance(value, float):
            return f"{value:,.1f}"
        return "" if value is None else str(value)

    if report["gpu"] is not None:
        table = Table(title=f"GPU: {report['gpu']['name']}")
        table.add_column("field")
        table.add_column("value")
        for key, value in report["gpu"].items():
            table.add_row(key, fmt(value))
        console.print(table)
    else:
        console.print("No CUDA GPU is visible to torch: showing the CPU.")
    cpu = Table(title=f"CPU: {report['cpu']['name']}")
    cpu.add_column("field")
    cpu.add_column("value")
    for key, value in report["cpu"].items():
        cpu.add_row(key, ", ".join(value) if isinstance(value, list | tuple) else fmt(value))
    console.print(cpu)

    ceil = report["ceilings"]
    on = f", {report['threads']} thread(s)" if report.get("threads") else ""
    table = Table(title=f"Ceilings ({report['device']}: {ceil['device_name']}{on})")
    table.add_column("ceiling")
    table.add_column("value")
    table.add_column("source")
    table.add_row("memory bandwidth GB/s", fmt(ceil["memory_bandwidth_gbs"]), ceil["sources"].get("bandwidth", ""))
    for dtype, tflops in ceil["peak_tflops"].items():
        table.add_row(f"{dtype} TFLOP/s", f"{tflops:,.3f}", ceil["sources"].get(dtype, ""))
    console.print(table)
    if ceil["path"]:
        verb = "recorded in" if report["measured"] else "measured values from"
        console.print(f"{verb} {ceil['path']}" + (f" at {ceil['measured_at']}" if ceil["measured_at"] else ""))
    elif not report["measured"]:
        console.print("no measured ceilings for this device yet: run `agentforge gpu --measure`")
