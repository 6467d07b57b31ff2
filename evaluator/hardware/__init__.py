"""Hardware feedback: what the device can do, how close a kernel came, and why not closer.

- `specs`: GPU and CPU spec tables, the device probe, measured ceilings (`measure_ceilings`,
  `load_ceilings`).
- `roofline`: speed-of-light floor (`floor_us`), arithmetic intensity, bound label.
- `ncu`: Nsight Compute runner and `--csv --page raw` parser, returning `ProfileRecord`.
- `compile_report`: ptxas `-v` resources and the SASS opcode histogram, no GPU needed.
- `render`: compact text for the judge's prompt, Markdown for run reports.

Standard library, torch and numpy only: this runs in the sandbox child on bare GPU images.
Nothing here has side effects at import; torch is imported inside the functions that need it.
"""
