"""The coder/judge optimisation loop (LangGraph): state, verdicts, prompts, nodes, wiring, runs."""
