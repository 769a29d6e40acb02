"""The test suite, one process against pytest-xdist workers, on a part of it.

    NOVAKIT_TEST_PG_URL=... NOVAKIT_TEST_PG2_URL=... \\
        .venv/bin/python bench/suite.py [--jobs 2] [--rounds 1] [-m "not serial"] PATH...

Runs ``pytest PATH...`` with ``-n 0`` and with ``-n JOBS`` in turn (A B A B ...: a machine whose
load drifts moves both alike), and prints for each run the wall seconds, the CPU seconds of
pytest and everything it waited for (``RUSAGE_CHILDREN``), and pytest's last line. The
PostgreSQL servers' own CPU is not counted. The figures are this machine's, at this moment: on a
shared machine quote the median of several rounds, and the CPU seconds beside the wall ones.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(paths: list[str], jobs: int, mark: str) -> tuple[float, float, str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", str(jobs)]
    if jobs:
        cmd += ["--dist", "loadgroup"]
    cmd += ["-m", mark, *paths]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return wall, cpu, lines[-1] if lines else f"rc={proc.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("-m", dest="mark", default="not serial")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    walls: dict[int, list[float]] = {0: [], args.jobs: []}
    for n in range(args.rounds):
        for jobs in (0, args.jobs):
            wall, cpu, last = run(args.paths, jobs, args.mark)
            walls[jobs].append(wall)
            print(f"round {n + 1} -n {jobs}: {wall:7.1f} s wall, {cpu:7.1f} s cpu  | {last}", flush=True)
    serial, parallel = statistics.median(walls[0]), statistics.median(walls[args.jobs])
    print(f"median wall: -n 0 {serial:.1f} s, -n {args.jobs} {parallel:.1f} s, ratio {serial / parallel:.2f}")


if __name__ == "__main__":
    main()
