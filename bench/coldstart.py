"""Cold start: what a fresh Lambda execution environment pays before it answers, side by side.

Each row is the median wall time of N fresh ``python`` processes (interpreter start-up, measured
as ``python -c pass``, subtracted), all in one run, so rows compare; each is also shown as a
multiple of the floor row, a bare ``import boto3, pydantic``, and as CPU time (steadier on a
busy machine). Like Lambda, whose code directories are read-only, the processes write no
bytecode: ``dormant`` comes with its bytecode, as layers/dormant/Makefile builds the layer
(as do the dependencies, from their install), ``functions/`` is compiled from source at
every cold start, as ``sam build`` copies it.

    python bench/coldstart.py                 # 7 processes per row
    python bench/coldstart.py --smoke         # one process per row (CI keeps it from rotting)
    python bench/coldstart.py --json out.json # also write {row: median ms}
    python bench/coldstart.py --layer         # also the Lambda layer's size (pip, no Docker)
    python bench/coldstart.py --python python3.13   # on the template's runtime (venvs on demand)
    python bench/coldstart.py --baseline DIR  # DIR's api and stream rows too (a before/after)

The function rows run ``functions/<name>/app.py`` as Lambda does (``functions/`` on the path,
the handler module imported, then one request): AWS is a moto server on 127.0.0.1 started by
this script (the functions reach it through ``AWS_ENDPOINT_URL_*``, as under ``sam local``),
with the template's table, bucket, schedule group, webhook queue and OpenAI secret in it.

- ``api``: no OpenAI secret (the sample's demo model), tracing off: the import and a first
  ``POST /turns``.
- ``api, deployed``: what the template sets: the OpenAI secret (Secrets Manager), the timers'
  scheduler, the webhook queue, and the Lambda variables that turn Powertools tracing on
  (``LAMBDA_TASK_ROOT``, ``_X_AMZN_TRACE_ID``). Its first request is one no model call serves
  (``GET /sessions/{id}``), and, as a separate row, a first ``POST /turns`` whose model call a
  local fake OpenAI server answers: that row pays for reading the secret and importing
  ``openai``, which only a model call needs.
- ``+ DORMANT_XRAY_SDK``: the same with the X-Ray SDK tracer opted into.
- ``stream``: the function that carries every chat turn, driven as its streaming runtime loop
  drives it (``dormant.aws.runtime``, which ``bootstrap-stream`` starts: logging configured,
  ``dormant.aws.stream`` imported as the init phase, then ``stream_handler(event, context,
  stream)``), the response stream kept in memory instead of posted to the Runtime API: a first
  ``POST /turns`` with ``Accept: text/event-stream`` (the turn's events streamed), and a first
  ``POST /agui``.
- ``webhook`` and ``wake``: the import in the deployed environment.

``--python python3.13`` runs the rows on another interpreter than this one: the functions
(and the floor) in a venv of the layer's requirements built from it
(``~/.cache/dormant-bench/dormant-layer-python3.13``, :func:`bench._venvs.ensure_layer_venv`),
Strands in its venv built from it (both installed on demand, as ``python -m bench`` installs
the peers); the moto and OpenAI stand-ins stay in this process.

The rows run in turn, one process each per round (the order rotated every round), so a
round's figures share the machine's state. Ratios are taken pair by pair, each round's
``api`` (and ``stream``) row against the same round's other row, and reported as their median:
each function against the floor, and against Strands Agents' own import, agent and first turn
(``bench/peers/strands.py coldstart``, its script doing nothing subtracted) when its venv is
installed (``python -m bench install``).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import py_compile
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ROOT / "functions"
LAYER = ROOT / "layers" / "dormant"

TABLE, BUCKET, GROUP, QUEUE = ("dormant-coldstart", "dormant-coldstart", "dormant-coldstart",
                               "dormant-coldstart.fifo")
SECRET = "dormant/openai-api-key"
FLOOR = "floor: import boto3, pydantic"

#: Fake credentials, always: the bench can never reach a real account.
AWS_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}
#: What every function gets from the template, tracing off.
FUNCTION_ENV = {
    "DORMANT_TABLE": TABLE, "DORMANT_BUCKET": BUCKET, "DORMANT_SESSION_TTL_DAYS": "30",
    "POWERTOOLS_SERVICE_NAME": "dormant", "POWERTOOLS_METRICS_NAMESPACE": "Dormant",
    "POWERTOOLS_TRACE_DISABLED": "true", "LOG_LEVEL": "INFO",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
}
#: The rest of a deployed function's environment: the secret, timers, hand-ons, and Lambda's
#: own variables under which Powertools traces (``POWERTOOLS_TRACE_DISABLED`` is removed).
DEPLOYED_ENV = {
    "DORMANT_OPENAI_SECRET": SECRET, "DORMANT_OPENAI_MODEL": "gpt-5.6-luna",
    "DORMANT_SCHEDULE_GROUP": GROUP,
    "DORMANT_WAKE_TARGET_ARN": "arn:aws:lambda:us-east-1:123456789012:function:dormant-wake",
    "DORMANT_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/dormant-scheduler",
    "DORMANT_SCHEDULE_DLQ_ARN": "arn:aws:sqs:us-east-1:123456789012:dormant-wake-dlq",
    "LAMBDA_TASK_ROOT": str(FUNCTIONS), "AWS_LAMBDA_FUNCTION_NAME": "dormant-api",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
    "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;"
                        "Sampled=1",
    "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000", "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
}

_CONTEXT = """
class Context:
    function_name = "dormant-api"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:dormant-api"
    aws_request_id = "c6af9ac6-0000-0000-0000-000000000001"
    log_group_name = "/aws/lambda/dormant-api"
    log_stream_name = "coldstart"
    def get_remaining_time_in_millis(self):
        return 29_000
"""
_EVENT = "import json\nevent = json.load(open({path!r}))\n"
#: A first POST /turns: a new session each process (no sessionId), one message.
_TURN = _CONTEXT + _EVENT.format(path=str(ROOT / "events" / "api_post_turn.json")) + """
event["body"] = json.dumps({"message": "Hi! Please book me in for one night."})
import api.app
reply = api.app.handler(event, Context())
assert reply["statusCode"] == 200, reply
"""
#: The stream function as bootstrap-stream runs it (dormant.aws.runtime.main: logging, then
#: the handler module imported as the init phase, then each invocation answered on a stream),
#: the stream held in memory: what the handler writes is checked, not posted anywhere.
_STREAM = _CONTEXT + _EVENT + """
import logging, os
from dormant.aws import runtime
logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO").upper())
if hasattr(runtime, "load"):
    stream_handler = runtime.load(runtime.DEFAULT_HANDLER)
else:  # a tree from before runtime.load (a before/after comparison)
    from dormant.aws.stream import stream_handler

class Stream:
    started = finished = False
    def start(self, status, headers=None, multi_value_headers=None, cookies=None):
        self.started, self.status, self.body = True, status, []
    def write(self, data):
        self.body.append(data)
    def finish(self):
        self.finished = True

{body}
invocation = runtime.Invocation(event, {{"Lambda-Runtime-Aws-Request-Id": "coldstart-1",
                                 "Lambda-Runtime-Deadline-Ms": "9999999999999"}})
out = Stream()
stream_handler(event, runtime.InvocationContext(invocation), out)
assert out.finished and out.status == 200, vars(out)
assert {last!r} in "".join(out.body), out.body
"""
#: A first POST /turns with Accept: text/event-stream: the turn's events as they happen.
_STREAM_TURN = _STREAM.format(
    path=str(ROOT / "events" / "api_post_turn.json"), last="event: result",
    body='event["body"] = json.dumps({"message": "Hi! Please book me in for one night."})\n'
         'event["headers"]["Accept"] = "text/event-stream"')
#: A first POST /agui (a new thread each process: the example's thread id made unique).
_STREAM_AGUI = _STREAM.format(
    path=str(ROOT / "events" / "api_post_agui.json"), last="RUN_FINISHED",
    body='import uuid\nbody = json.loads(event["body"])\n'
         'body["threadId"] = str(uuid.uuid4())\nevent["body"] = json.dumps(body)')
#: A first GET /sessions/{id}: no model call (the session does not exist: 404).
_READ = _CONTEXT + _EVENT.format(path=str(ROOT / "events" / "api_get_session.json")) + """
import api.app
reply = api.app.handler(event, Context())
assert reply["statusCode"] == 404, reply
"""


API = "api: import + first turn (no secret, tracing off)"
STREAM = "stream: import + first streamed POST /turns (no secret, tracing off)"
PASS = "python -c pass (subtracted)"
STRANDS = "Strands Agents: import + agent + first turn"
STRANDS_IDLE = "Strands Agents: its script doing nothing (subtracted)"
#: The paired ratios: name -> (row, other row, what the other row subtracts).
PAIRS = {
    "api ÷ floor (paired)": (API, FLOOR, PASS),
    "api ÷ Strands (paired)": (API, STRANDS, STRANDS_IDLE),
    "stream ÷ floor (paired)": (STREAM, FLOOR, PASS),
    "stream ÷ Strands (paired)": (STREAM, STRANDS, STRANDS_IDLE),
}


def rows() -> dict[str, tuple[str, dict[str, str]]]:
    """Row name -> (code a fresh process runs, the environment it adds)."""
    deployed = {**DEPLOYED_ENV, "POWERTOOLS_TRACE_DISABLED": ""}
    return {
        PASS: ("pass", {}),
        FLOOR: ("import boto3, pydantic", {}),
        "import dormant": ("import dormant", {}),
        API: (_TURN, {}),
        STREAM: (_STREAM_TURN, {}),
        "stream: import + first POST /agui (no secret, tracing off)": (_STREAM_AGUI, {}),
        "api, deployed: import + first GET /sessions/{id}": (_READ, deployed),
        "api, deployed: import + first turn (model call: openai imported)": (_TURN, deployed),
        "api, deployed + DORMANT_XRAY_SDK: import + first GET": (
            _READ, {**deployed, "DORMANT_XRAY_SDK": "true"}),
        "webhook, deployed: import": ("import webhook.app", deployed),
        "wake, deployed: import": ("import wake.app", deployed),
    }


def peer_rows(interpreter: str | None = None) -> dict[str, list[str]]:
    """Strands Agents' cold start and its idle script (argv), when its venv is installed
    (``interpreter``: its venv built from that interpreter, installed now when missing)."""
    sys.path.insert(0, str(ROOT))
    from bench._venvs import PEERS, ensure_peer

    peer = PEERS["strands"]
    if interpreter is not None:
        ensure_peer(peer, interpreter)
    python = peer.venv_on(interpreter) / "bin" / "python" if interpreter else peer.python
    if not python.exists():
        return {}
    script = str(ROOT / "bench" / "peers" / "strands.py")
    return {STRANDS: [str(python), script, "coldstart", "{}"],
            STRANDS_IDLE: [str(python), script, "noop", "{}"]}


def _once(argv: list[str], env: Mapping[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(argv, env=dict(env), cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode:
        raise SystemExit(f"a cold start failed:\n{argv}\n{run.stdout}{run.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


@contextmanager
def aws() -> Iterator[dict[str, str]]:
    """A moto server on 127.0.0.1 holding the template's resources; yields the endpoint env."""
    os.environ.update(AWS_ENV)
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        def client(service: str) -> Any:
            return boto3.client(service, endpoint_url=url, region_name="us-east-1")

        sys.path.insert(0, str(LAYER))
        from dormant.stores import DynamoDBStore

        DynamoDBStore(TABLE, client=client("dynamodb")).ensure_table()
        client("s3").create_bucket(Bucket=BUCKET)
        client("scheduler").create_schedule_group(Name=GROUP)
        queue = client("sqs").create_queue(QueueName=QUEUE, Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
        client("secretsmanager").create_secret(Name=SECRET, SecretString="sk-coldstart")
        env = {"AWS_ENDPOINT_URL": url, "WEBHOOK_QUEUE_URL": queue}
        env.update({f"AWS_ENDPOINT_URL_{s}": url for s in
                    ("DYNAMODB", "S3", "SQS", "SCHEDULER", "SECRETSMANAGER", "SSM")})
        yield env
    finally:
        server.stop()


@contextmanager
def fake_openai(replies: int) -> Iterator[str]:
    """The tests' local OpenAI stand-in, scripted with ``replies`` one-line answers."""
    sys.path.insert(0, str(ROOT))
    from tests.unit.openai_fake import FakeOpenAI, responses_stream

    server = FakeOpenAI()
    server.script(*[responses_stream("Which night would you like?") for _ in range(replies)])
    try:
        yield server.base_url
    finally:
        server.close()


def _as_the_layer_ships_it(target: Path, python: str, layer: Path = LAYER) -> None:
    """``dormant`` (``layer``'s) as layers/dormant/Makefile puts it in the layer: with
    unchecked-hash bytecode (``python``'s), which Lambda uses as it is."""
    shutil.copytree(layer / "dormant", target / "dormant",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if python == sys.executable:
        compileall.compile_dir(target / "dormant", quiet=1,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    else:
        subprocess.run([python, "-m", "compileall", "-q", "--invalidation-mode",
                        "unchecked-hash", str(target / "dormant")], check=True)


def paired_ratios(walls: Mapping[str, list[float]]) -> dict[str, float]:
    """Each :data:`PAIRS` ratio whose rows ran: per round, (row - its start-up) over (other
    row - what it subtracts), all from that round; then the median over the rounds."""
    ratios = {}
    pairs = {**PAIRS, **{baseline(label): (baseline(mine), other, idle)
                         for label, (mine, other, idle) in PAIRS.items()}}
    for label, (mine, other, idle) in pairs.items():
        if mine in walls and other in walls and idle in walls:
            ratios[label] = statistics.median(
                (a - pa) / (b - pb) for a, pa, b, pb in zip(
                    walls[mine], walls[PASS], walls[other], walls[idle], strict=True))
    return ratios


def cpu_label(ratio: str) -> str:
    """The name of a paired ratio taken on CPU times (steadier on a busy machine)."""
    return f"{ratio}, cpu"


#: What ``--baseline`` repeats from another checkout (its layer and functions).
BASELINE_ROWS = (API, STREAM)


def baseline(name: str) -> str:
    return f"{name} [baseline]"


def measure(runs: int, peers: bool = True, interpreter: str | None = None,
            before: Path | None = None) -> tuple[dict[str, tuple[float, float]],
                                                 dict[str, float]]:
    """Median wall and CPU ms per row, interpreter start-up subtracted (the ``pass`` and idle
    rows are dropped), and the paired ratios (:data:`PAIRS`; each also on CPU times, named
    by :func:`cpu_label`). The process's CPU time is
    steadier than its wall time on a busy machine (the moto server's work is the parent's,
    not counted). Every round runs each row once, in an order rotated round by round.
    ``interpreter`` (a name on PATH): the rows run on it, in venvs built from it. ``before``:
    a checkout of another commit, whose :data:`BASELINE_ROWS` run beside these, in the same
    rounds (its ratios paired as these are)."""
    table = rows()
    python = sys.executable
    if interpreter is not None:
        sys.path.insert(0, str(ROOT))
        from bench._venvs import ensure_layer_venv

        python = str(ensure_layer_venv(interpreter))
    peer_argv = peer_rows(interpreter) if peers else {}
    with (aws() as endpoints, fake_openai(runs * 2 + 2) as openai_url,
          tempfile.TemporaryDirectory() as layer, tempfile.TemporaryDirectory() as old):
        _as_the_layer_ships_it(Path(layer), python)
        if before is not None:
            _as_the_layer_ships_it(Path(old), python, before / "layers" / "dormant")
            for name in BASELINE_ROWS:
                code, extra = table[name]
                table[baseline(name)] = (code, {**extra, "PYTHONPATH": os.pathsep.join(
                    [str(before / "functions"), old])})
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DORMANT_",
                                                                          "POWERTOOLS_"))}
        base.update(AWS_ENV, **FUNCTION_ENV, **endpoints, OPENAI_BASE_URL=openai_url,
                    PYTHONPATH=os.pathsep.join([str(FUNCTIONS), layer]),
                    PYTHONDONTWRITEBYTECODE="1")
        argv: dict[str, list[str]] = {name: [python, "-c", code]
                                      for name, (code, _) in table.items()}
        envs: dict[str, dict[str, str]] = {}
        for name, (_, extra) in table.items():
            envs[name] = {k: v for k, v in {**base, **extra}.items() if v != ""}
        peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for name, command in peer_argv.items():
            argv[name], envs[name] = command, peer_env
        names = list(argv)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for round_ in range(runs):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(_once(argv[name], envs[name]))
    ratios = paired_ratios({name: [wall * 1000 for wall, _ in got]
                            for name, got in samples.items()})
    ratios.update({cpu_label(name): value for name, value in paired_ratios(
        {name: [cpu * 1000 for _, cpu in got] for name, got in samples.items()}).items()})
    medians = {name: (statistics.median(w for w, _ in got) * 1000,
                      statistics.median(c for _, c in got) * 1000)
               for name, got in samples.items()}
    wall0, cpu0 = medians.pop(PASS)
    idle = medians.pop(STRANDS_IDLE, None)
    figures = {name: (wall - wall0, cpu - cpu0) for name, (wall, cpu) in medians.items()}
    if idle is not None:
        wall, cpu = medians[STRANDS]
        figures[STRANDS] = (wall - idle[0], cpu - idle[1])
    return figures, ratios


def layer_mb() -> float:
    """Size in MB (``du -sm``: disk blocks, MiB) of the layer ``sam build`` makes for
    python3.13, built by the same recipe (``make build-DormantLayer`` in layers/dormant: the
    requirements as manylinux wheels for CPython 3.13 with both architectures' compiled modules,
    x86_64 and aarch64, the ``dormant`` package, their bytecode). pip downloads the wheels;
    no Docker. The bytecode is python3.13's when it is on PATH, else this interpreter's (about
    the same size)."""
    python = "python3.13"
    try:
        subprocess.run([python, "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        make = subprocess.run(["make", "--silent", "-C", str(LAYER), "build-DormantLayer",
                               f"ARTIFACTS_DIR={tmp}", f"PYTHON={python}"],
                              capture_output=True, text=True)
        if make.returncode:
            raise SystemExit(f"the layer did not build:\n{make.stdout}{make.stderr}")
        blocks = sum(f.lstat().st_blocks for f in Path(tmp, "python").rglob("*"))
    return blocks * 512 / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="one process per row, no peer (what CI runs)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="write {row: median ms} (and layer_mb with --layer) here")
    parser.add_argument("--layer", action="store_true",
                        help="also measure the layer's size (pip downloads the wheels)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a checkout of another commit (git worktree, git archive): its "
                             "api and stream rows run beside these, in the same rounds")
    parser.add_argument("--python", metavar="NAME",
                        help="run the rows on this interpreter (python3.13: the template's "
                             "runtime), in venvs built from it on demand")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    medians, ratios = measure(runs, peers=not args.smoke, interpreter=args.python,
                              before=args.baseline)
    floor, cpu_floor = medians[FLOOR]
    python = sys.executable
    if args.python:
        from bench._venvs import runnable  # (measure put the repository on the path)

        python = runnable(args.python)
    version = subprocess.run([python, "--version"], capture_output=True,
                             text=True).stdout.strip()
    print(f"cold start on {version}, ms (median of {runs} fresh processes, interpreter "
          f"start-up subtracted; x = multiple of the floor row)")
    width = max(map(len, [*medians, *ratios])) + 2
    print(f"  {'':<{width}}{'wall':>7}  {'x':>5}  {'cpu':>6}  {'x':>5}")
    for name, (wall, cpu) in medians.items():
        print(f"  {name:<{width}}{wall:>7.0f}  {wall / floor:>4.1f}x  {cpu:>6.0f}  "
              f"{cpu / cpu_floor:>4.1f}x")
    print(f"paired run by run (median of {runs} rounds' ratios):")
    for name, value in ratios.items():
        if cpu_label(name) in ratios:
            print(f"  {name:<{width}}{value:>6.2f}x {'':>6}{ratios[cpu_label(name)]:>6.2f}x")
    if not any("Strands" in name for name in ratios):
        print("  (÷ Strands: install the peers' venvs first, python -m bench install)")
    figures: dict[str, float] = {name: round(wall, 1) for name, (wall, _) in medians.items()}
    figures.update({name: round(value, 3) for name, value in ratios.items()})
    if args.layer:
        size = layer_mb()
        print(f"  {'Lambda layer (python3.13, x86_64 + arm64 modules), MB':<{width}}"
              f"{size:>7.1f}")
        figures["layer_mb"] = round(size, 1)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
