"""Cold start: what a fresh Lambda interpreter pays to import the code path, side by side.

Each row is the median wall time of N fresh ``python -c`` processes doing one import (process
start-up itself is measured too and subtracted), in one run, so rows compare:

    python bench/coldstart.py            # 7 processes per row
    python bench/coldstart.py --smoke    # one process per row (CI keeps it from rotting)

The api function row imports ``functions/api/app.py`` as Lambda would (``functions/`` on the
path, fake AWS settings, no network): layer, Powertools, boto3 client set-up and the resolver.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ROWS: dict[str, str] = {
    "python -c pass (subtracted)": "pass",
    "pydantic (the floor: every wire type)": "import pydantic; from pydantic import BaseModel",
    "import dormant": "import dormant",
    "dormant + handlers built": (
        "import dormant; app = dormant.App(); "
        "a = app.agent(name='a', hooks=[dormant.Hook(before_agent=lambda c: 'x')]); "
        "app.handler.rest(agent=a)({'input': {'message': 'hi'}})"),
    "api function module (functions/api/app.py)": "import app",
    "openai (reference: imported only on a model call)": "import openai",
}

LAMBDA_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing", "DORMANT_TABLE": "dormant-coldstart",
    "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_SERVICE_NAME": "dormant",
    "POWERTOOLS_METRICS_NAMESPACE": "Dormant",
}


def _once(code: str) -> float:
    env = {**os.environ, **LAMBDA_ENV,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "functions" / "api"),
                                          str(ROOT / "functions")])}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one process per row")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    medians = {name: statistics.median(_once(code) for _ in range(runs)) * 1000
               for name, code in ROWS.items()}
    base = medians.pop("python -c pass (subtracted)")
    print(f"cold import, ms (median of {runs} fresh processes, interpreter start-up of "
          f"{base:.0f} ms subtracted)")
    for name, value in medians.items():
        print(f"  {name:<52}{value - base:>8.0f}")


if __name__ == "__main__":
    main()
