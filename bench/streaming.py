"""Streamed against buffered: when each event of a turn reaches the client, side by side.

The stream function runs as on Lambda: ``bootstrap-stream`` starts dormant's streaming
Runtime API loop in its own process, in front of which ``tests/_gateway.py`` plays API Gateway
(REST proxy, a Cognito-style authorizer) with the integration's transfer mode ``STREAM``, and
again with ``BUFFERED`` (what API Gateway does for a Lambda proxy integration by default: the
whole answer once the function has finished). AWS is a moto server on 127.0.0.1. The model
(``tests/functions/stream_app.py``) streams ``--words`` words, one every ``--delay`` seconds,
the first one too, like a model's first token. Both modes run in the same process, rotated
run by run.

    python bench/streaming.py              # 5 runs per mode, 8 words 0.25 s apart
    python bench/streaming.py --smoke      # one run per mode, 3 words (CI keeps it from rotting)
    python bench/streaming.py --json out.json
    python bench/streaming.py --markdown bench/results/streaming.md

Per mode, medians over the runs: the time to the first byte of the body, to the first event
and to the first token event, the time between token arrivals, and the time to the last
byte; then buffered / streamed for the time to first byte.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._gateway import Gateway  # noqa: E402

WRAPPER = ROOT / "layers" / "dormant" / "dormant" / "aws" / "bootstrap-stream"
APP = ROOT / "tests" / "functions" / "stream_app.py"
TOKENS = {"bench-token": "bench-user"}
TABLE, BUCKET = "dormant-bench-stream", "dormant-bench-stream"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


@contextmanager
def aws() -> Iterator[dict[str, str]]:
    """A moto server on 127.0.0.1 with the table and bucket; yields the function's env."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    os.environ.update(AWS_ENV)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        from dormant.stores import DynamoDBStore

        client = boto3.client("dynamodb", endpoint_url=url)
        DynamoDBStore(TABLE, client=client).ensure_table()
        boto3.client("s3", endpoint_url=url).create_bucket(Bucket=BUCKET)
        yield {**AWS_ENV, "AWS_ENDPOINT_URL": url, "DORMANT_TABLE": TABLE,
               "DORMANT_BUCKET": BUCKET}
    finally:
        server.stop()


@contextmanager
def function(mode: str, env: dict[str, str], words: int, delay: float) -> Iterator[Gateway]:
    with Gateway(TOKENS, mode=mode) as gateway:
        process = subprocess.Popen(
            [str(WRAPPER), sys.executable, "/var/runtime/bootstrap.py"],
            env={**os.environ, **env, "AWS_LAMBDA_RUNTIME_API": gateway.runtime_api,
                 "LAMBDA_TASK_ROOT": str(ROOT / "functions"), "DORMANT_APP": str(APP),
                 "AWS_LAMBDA_FUNCTION_NAME": "dormant-stream", "LOG_LEVEL": "WARNING",
                 "STREAM_TEST_WORDS": str(words), "STREAM_TEST_DELAY": str(delay)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield gateway
        finally:
            process.kill()
            process.wait(10)


def one_turn(gateway: Gateway, thread: str) -> dict[str, Any]:
    """One POST /agui: when its first byte, each event and its last byte arrived (seconds)."""
    body = {"threadId": thread, "runId": "r", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m", "role": "user", "content": "hi"}]}
    conn = http.client.HTTPConnection(gateway.url.removeprefix("http://"), timeout=120)
    sent = time.monotonic()
    conn.request("POST", "/agui", body=json.dumps(body), headers={
        "Authorization": "Bearer bench-token", "Content-Type": "application/json"})
    reply = conn.getresponse()
    first_byte = None
    events: list[tuple[float, str]] = []
    while line := reply.readline():
        now = time.monotonic() - sent
        first_byte = now if first_byte is None else first_byte
        if line.startswith(b"data:"):
            events.append((now, json.loads(line[5:])["type"]))
    conn.close()
    if reply.status != 200 or not events or events[-1][1] != "RUN_FINISHED":
        raise SystemExit(f"the turn did not finish: {reply.status} {events[-1:]}")
    tokens = [at for at, kind in events if kind == "TEXT_MESSAGE_CONTENT"]
    return {"first_byte": first_byte, "first_event": events[0][0], "first_token": tokens[0],
            "token_gap": statistics.median(b - a for a, b in itertools.pairwise(tokens))
            if len(tokens) > 1 else 0.0,
            "last_byte": time.monotonic() - sent}


def measure(runs: int, words: int, delay: float) -> dict[str, dict[str, float]]:
    samples: dict[str, list[dict[str, Any]]] = {"STREAM": [], "BUFFERED": []}
    with aws() as env:
        for run in range(runs):
            order = ("STREAM", "BUFFERED") if run % 2 == 0 else ("BUFFERED", "STREAM")
            for mode in order:
                with function(mode, env, words, delay) as gateway:
                    one_turn(gateway, f"session_warm_{mode}_{run}")  # the cold start
                    samples[mode].append(one_turn(gateway, f"session_{mode}_{run}"))
    return {mode: {key: statistics.median(s[key] for s in found) for key in found[0]}
            for mode, found in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one run per mode, 3 words")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--words", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.25)
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the table here")
    args = parser.parse_args()
    runs, words = (1, 3) if args.smoke else (args.runs, args.words)
    figures = measure(runs, words, args.delay)
    print(f"POST /agui through the stream function: {words} tokens, {args.delay} s apart, "
          f"median of {runs} warm runs per mode (seconds from the request)")
    keys = ("first_byte", "first_event", "first_token", "token_gap", "last_byte")
    print(f"  {'':<10}" + "".join(f"{k:>13}" for k in keys))
    for mode, row in figures.items():
        print(f"  {mode:<10}" + "".join(f"{row[k]:>13.3f}" for k in keys))
    streamed, buffered = figures["STREAM"], figures["BUFFERED"]
    ratio = buffered["first_byte"] / streamed["first_byte"]
    print(f"  time to first byte, buffered / streamed: {ratio:.1f}x")
    if args.json:
        args.json.write_text(json.dumps({**figures, "ttfb_ratio": round(ratio, 2)}, indent=2)
                             + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(figures, runs, words, args.delay, ratio))


def markdown(figures: dict[str, dict[str, float]], runs: int, words: int, delay: float,
             ratio: float) -> str:
    lines = ["# Streamed against buffered", "",
             f"`python bench/streaming.py`: `POST /agui` through the stream function, {words} "
             f"tokens {delay} s apart, median of {runs} warm runs per transfer mode, both modes "
             f"in one run, rotated (seconds from the request).", "",
             "| transfer mode | first byte | first event | first token | between tokens "
             "| last byte |", "|---|---:|---:|---:|---:|---:|"]
    for mode, row in figures.items():
        lines.append(f"| {mode} | " + " | ".join(f"{row[k]:.3f}" for k in (
            "first_byte", "first_event", "first_token", "token_gap", "last_byte")) + " |")
    lines += ["", f"Time to first byte, buffered / streamed: {ratio:.0f} times.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
