"""DynamoDBStore factories for the conformance suite: moto in-process, moto server (HTTP), and
Amazon's DynamoDB Local."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

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
    server = shared_moto_server()
    yield from _fresh_table(server.url, lambda: server.client("dynamodb"))


def dynamodb_local() -> Iterator[Store]:
    """Amazon's DynamoDB Local (a second, independent engine), in its own network namespace
    (see ``tests/_dynamodb_local.py``); a fresh table per test, deleted after."""
    from tests._dynamodb_local import shared_dynamodb_local

    local = shared_dynamodb_local()
    yield from _fresh_table(local.url, local.client)


def _fresh_table(url: str, client: Callable[[], Any]) -> Iterator[Store]:
    """A store on a fresh table of the engine at ``url`` (found through
    ``AWS_ENDPOINT_URL_DYNAMODB`` alone, as under ``sam local``), deleted after."""
    with pytest.MonkeyPatch.context() as patch:
        aws_env(patch)
        patch.setenv("AWS_ENDPOINT_URL_DYNAMODB", url)
        table = f"dormant-conformance-{uuid.uuid4().hex[:12]}"
        store = DynamoDBStore(table)
        store.ensure_table()
        try:
            yield store
        finally:
            client().delete_table(TableName=table)
