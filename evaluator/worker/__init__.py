"""The candidate worker's side: build, load and run the candidate (`candidate_side.serve_request`),
in a process the judge treats as hostile. Nothing here imports `judge/`: what the worker says
reaches the judge only as data, through `protocol/`."""
