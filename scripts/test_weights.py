"""Write tests/weights.txt from a run's JUnit XML: each test file's seconds, heaviest first.

    .venv/bin/pytest -n 2 --dist loadfile --junitxml=/tmp/run.xml
    python scripts/test_weights.py /tmp/run.xml > tests/weights.txt

`tests/conftest.py` hands the files to the two workers heaviest first (longest processing time
first), so that no 3-minute file starts while the other worker has nothing left to run. A stale
weight only changes the order, never what runs.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET

HEADER = ("# Seconds each test file took in a full run (`make test`, 2 workers), heaviest first: the order\n"
          "# the workers take files in (tests/conftest.py). Written by scripts/test_weights.py; files not\n"
          "# listed come after these, in collection order. Source: {source}\n")


def file_seconds(junit: str) -> dict[str, float]:
    """Seconds per test file (`tests/a/test_b.py`), summed over its test cases."""
    totals: dict[str, float] = collections.defaultdict(float)
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split("::")[0]
        parts = module.split(".")
        # classname is `tests.a.test_b` or `tests.a.test_b.TestClass`
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            totals["/".join(parts) + ".py"] += float(case.get("time", 0) or 0)
    return dict(totals)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", help="a JUnit XML file written by pytest --junitxml")
    parser.add_argument("--source", default="", help="what run it came from (commit, machine, date)")
    args = parser.parse_args(argv)
    seconds = file_seconds(args.junit)
    sys.stdout.write(HEADER.format(source=args.source or args.junit))
    for path, took in sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0])):
        if took >= 1.0:
            sys.stdout.write(f"{took:.0f} {path}\n")


if __name__ == "__main__":
    main()
