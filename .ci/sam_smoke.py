"""Import and invoke what `sam build` produced, under python3.13, laid out as Lambda lays it out.

Run with ``python3.13 -I .ci/sam_smoke.py .aws-sam/build [RUNTIME]``; with ``--layers-only``
it checks the layers' compiled modules (below) and imports nothing (an arm64 build on an
x86_64 machine). ``sys.path`` is the
function's code (/var/task), then its layers (/opt/python), then what the Lambda runtime itself
ships (boto3 and botocore: ``RUNTIME``, a directory .ci/sam installs them into), and nothing
from a dev environment, so a dependency missing from layers/dormant/requirements.txt, or a file
missing from the functions' CodeUri, fails here. Only requests that need no AWS call are made (the OpenAPI page, a batch whose
record is malformed): the moto-backed tests cover the rest.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

layers_only = "--layers-only" in sys.argv
args = [arg for arg in sys.argv[1:] if arg != "--layers-only"]
build = Path(args[0]).resolve()
root = Path(__file__).resolve().parents[1]
ARCHITECTURES = ("x86_64", "aarch64")  # template.yaml's Architecture: x86_64 or arm64


def check_both_architectures(layer: Path) -> None:
    """Every compiled module of ``layer`` is there for both Lambda architectures, named for
    its platform (CPython imports the one for its own), and none is named for neither."""
    modules = [p for p in layer.rglob("*.so")] + [p for p in layer.rglob("*.so.*")]
    built: dict[str, set[str]] = {arch: set() for arch in ARCHITECTURES}
    for module in modules:
        relative = str(module.relative_to(layer))
        arch = next((a for a in ARCHITECTURES if relative.endswith(f"-{a}-linux-gnu.so")), None)
        assert arch is not None, f"{relative}: a compiled module of no single architecture"
        built[arch].add(relative.removesuffix(f"-{arch}-linux-gnu.so"))
    assert built["x86_64"], f"{layer}: no compiled modules at all"
    assert built["x86_64"] == built["aarch64"], (layer, built)
    print(f"{layer.parent.name}: {len(built['x86_64'])} compiled modules, each for x86_64 and "
          f"aarch64")


for built_layer in ("DormantLayer", "XRaySdkLayer"):
    check_both_architectures(build / built_layer / "python")
if layers_only:
    sys.exit(0)
# The app the functions serve, as the built template's Globals name it (DORMANT_APP): the
# repository's sample, or a `dormant new` project's own app.
[app_spec] = re.findall(r"^\s+DORMANT_APP:\s*(\S+)\s*$", (build / "template.yaml").read_text(),
                        re.MULTILINE)
if len(args) > 1:  # the runtime's own packages come after the layers, as on Lambda
    sys.path.append(str(Path(args[1]).resolve()))
os.environ.update({
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing", "DORMANT_TABLE": "dormant-smoke",
    "DORMANT_BUCKET": "dormant-smoke", "POWERTOOLS_SERVICE_NAME": "dormant",
    "POWERTOOLS_METRICS_NAMESPACE": "Dormant", "POWERTOOLS_TRACE_DISABLED": "true",
    # Nothing listens there: a request that should not reach AWS fails instead of leaving.
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "DORMANT_APP": app_spec,
})


class Context:
    function_name = "smoke"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:smoke"
    aws_request_id = "smoke-request"


def event(name: str) -> dict:
    return json.loads((root / "events" / name).read_text())


def fresh_path(function: str, layers: tuple[str, ...] = ("DormantLayer",)) -> None:
    sys.path[:0] = [str(build / function), *(str(build / layer / "python") for layer in layers)]
    for name in [m for m in sys.modules if m.split(".")[0] in {"api", "stream", "webhook", "wake",
                                                                "cleanup", "bookings", "app"}
                 or m.startswith(("dormant.aws.", "dormant.samples."))]:
        del sys.modules[name]


assert sys.version_info[:2] == (3, 13), sys.version
# The layers carry their bytecode (layers/*/Makefile): a cold start compiles none of it.
for layer, package in (("DormantLayer", "dormant"), ("DormantLayer", "pydantic"),
                       ("DormantLayer", "aws_lambda_powertools"), ("XRaySdkLayer", "botocore")):
    pycache = build / layer / "python" / package / "__pycache__"
    assert (pycache / "__init__.cpython-313.pyc").is_file(), pycache

fresh_path("ApiFunction")
import api.app  # noqa: E402

served = sys.modules["dormant.aws.api"].app
docs = api.app.handler(event("api_get_docs.json"), Context())
assert docs["statusCode"] == 200, docs
assert api.app.__file__.startswith(str(build / "ApiFunction")), api.app.__file__

fresh_path("StreamFunction")
import stream.app  # noqa: E402

# The streaming loop's wrapper ships in the layer, executable (the runtime execs it).
wrapper = build / "DormantLayer" / "python" / "dormant" / "aws" / "bootstrap-stream"
assert wrapper.is_file() and os.access(wrapper, os.X_OK), wrapper
assert re.search(r"AWS_LAMBDA_EXEC_WRAPPER:\s*/opt/python/dormant/aws/bootstrap-stream",
                 (build / "template.yaml").read_text()), "StreamFunction names no wrapper"
import dormant.aws.runtime  # noqa: E402, F401  (what the wrapper runs)

# A request the authorizer named nobody for is refused before any AWS call.
anonymous = event("api_post_agui.json")
anonymous["requestContext"].pop("authorizer", None)
refused = stream.app.handler(anonymous, Context())
assert refused["statusCode"] == 401, refused
assert stream.app.__file__.startswith(str(build / "StreamFunction")), stream.app.__file__

fresh_path("WebhookFunction")
import webhook.app  # noqa: E402

batch = event("webhook_sqs_fifo_batch.json")
bad = [r for r in batch["Records"] if "text" not in json.loads(r["body"])]
reply = webhook.app.handler({"Records": bad}, Context())
assert reply == {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in bad]}, reply

fresh_path("WakeFunction")
import wake.app  # noqa: E402

try:  # a malformed timer event raises before any AWS call (Lambda would retry, then DLQ it)
    wake.app.handler({"sessionId": "session_smoke"}, Context())
except sys.modules["dormant.aws.wake"].InvalidTimerEvent:
    pass
else:
    raise AssertionError("the wake function accepted an event that is not a timer delivery")
assert wake.app.__file__.startswith(str(build / "WakeFunction")), wake.app.__file__

fresh_path("CleanupFunction", ("DormantLayer", "XRaySdkLayer"))
import cleanup.app  # noqa: E402

# A removal that names no S3 object needs no AWS call; one naming another session's key is
# refused on its own (reported, nothing deleted).
removed = event("cleanup_ddb_stream_remove.json")
[record] = removed["Records"]
quiet = json.loads(json.dumps(record))
del quiet["dynamodb"]["OldImage"]["s3"]
foreign = json.loads(json.dumps(record))
foreign["dynamodb"]["OldImage"]["s3"] = {"SS": ["ledger/another-session/000000000001-x.json"]}
foreign["dynamodb"]["SequenceNumber"] = "2"
reply = cleanup.app.handler({"Records": [quiet, foreign]}, Context())
assert reply == {"batchItemFailures": [{"itemIdentifier": "2"}]}, reply
assert cleanup.app.__file__.startswith(str(build / "CleanupFunction")), cleanup.app.__file__

import pydantic  # noqa: E402

import dormant  # noqa: E402

for module in (dormant, pydantic):
    assert str(build / "DormantLayer") in module.__file__, module.__file__
# The runtime's boto3/botocore serve the functions; the layer carries neither, nor the X-Ray SDK.
for package in ("boto3", "botocore", "aws_xray_sdk"):
    assert not (build / "DormantLayer" / "python" / package).exists(), package
# Nor `dormant dev`'s browser console: nothing of it is on the Lambda path.
for extra in ("_web", "_console.py", "scaffold"):
    assert not (build / "DormantLayer" / "python" / "dormant" / extra).exists(), extra
assert "dormant._console" not in sys.modules, "the api function imported the console"
print(f"sam build smoke: api, stream, webhook, wake and cleanup import and answer under Python "
      f"{sys.version.split()[0]} from {build}, serving {served.name} ({app_spec})")
