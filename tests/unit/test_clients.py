"""The library's own AWS clients (dormant._clients): no boto3 import of their own, and once
boto3 is loaded, boto3's default session, so a test kit that resets it (moto's ``mock_aws``)
reaches every client the library makes afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from dormant._clients import aws_client

first = aws_client("dynamodb", region_name="us-east-1")
seen = {"boto3_after_first": "boto3" in sys.modules}

from moto import mock_aws  # imports boto3, adds its stubber to botocore's handlers

with mock_aws():
    from dormant.stores import DynamoDBStore

    store = DynamoDBStore("dormant-clients", region_name="us-east-1")
    seen["created"] = store.ensure_table()
    seen["tables"] = aws_client("dynamodb", region_name="us-east-1").list_tables()["TableNames"]
print(json.dumps(seen))
"""


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # Credentials that reach nothing: a client that escaped the mock fails, it never works.
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1",
               PYTHONPATH=str(ROOT / "layers" / "dormant"))
    return env


def test_clients_made_before_boto3_is_loaded_do_not_keep_later_ones_from_a_mock() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE], env=_clean_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])

    assert seen["boto3_after_first"] is False  # the first client came from botocore alone
    assert seen["created"] is True
    assert seen["tables"] == ["dormant-clients"]  # moto answered, not AWS


TRUSTING = """
import json, sys
import botocore.loaders
from botocore.exceptions import DataNotFoundError

listed = []
scan = botocore.loaders.Loader.list_available_services

def counted(self, *args):
    listed.append(args)
    return scan(self, *args)

botocore.loaders.Loader.list_available_services = counted
from dormant._clients import aws_client

client = aws_client("dynamodb", region_name="us-east-1")
seen = {"operation": client.meta.service_model.operation_model("PutItem").name,
        "listed": listed}
try:
    aws_client("dynamodbb", region_name="us-east-1")
except DataNotFoundError as error:
    seen["misspelt"] = type(error).__name__
print(json.dumps(seen))
"""


def test_the_library_s_session_loads_a_service_model_without_listing_every_service() -> None:
    # botocore checks a name against every service's folder (~900 directory reads at a cold
    # start) before loading its model; the library's loader takes its own names on trust.
    run = subprocess.run([sys.executable, "-c", TRUSTING], env=_clean_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])

    assert seen["operation"] == "PutItem"
    assert seen["listed"] == []
    assert seen["misspelt"] == "DataNotFoundError"  # a wrong name still fails, at its load
