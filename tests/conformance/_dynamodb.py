"""DynamoDBStore factories for the conformance suite: moto in-process, moto server (HTTP), and
Amazon's DynamoDB Local."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from dormant.stores import DynamoDBStore, Store
from tests._moto import aws_env, in_process_aws, shared_moto_server


def dynamodb_in_process() -> Iterator[Store]:
    """moto in memory (``mock_aws``), calls into moto serialised."""
    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        with in_process_aws():
            store = DynamoDBStore("dormant-conformance")
            store.ensure_table()
            yield store


def dynamodb_server() -> Iterator[Store]:
    """moto server on 127.0.0.1 over HTTP; the store finds it through
    ``AWS_ENDPOINT_URL_DYNAMODB`` alone, as under ``sam local``."""
    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        server = shared_moto_server()
        patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", server.url)
        table = f"dormant-conformance-{uuid.uuid4().hex[:12]}"
        store = DynamoDBStore(table)
        store.ensure_table()
        try:
            yield store
        finally:
            server.client("dynamodb").delete_table(TableName=table)


def dynamodb_local() -> Iterator[Store]:
    """Amazon's DynamoDB Local (a second, independent engine), in its own network namespace
    (see ``tests/_dynamodb_local.py``); a fresh table per test, deleted after."""
    from tests._dynamodb_local import shared_dynamodb_local

    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        local = shared_dynamodb_local()
        patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", local.url)
        table = f"dormant-conformance-{uuid.uuid4().hex[:12]}"
        store = DynamoDBStore(table)
        store.ensure_table()
        try:
            yield store
        finally:
            local.client().delete_table(TableName=table)
