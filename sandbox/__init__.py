"""Where an evaluation job runs: a limited child process (default), a container, a Ray pool."""
