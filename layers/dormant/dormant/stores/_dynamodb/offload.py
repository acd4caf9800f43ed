"""Events too large for a DynamoDB transaction live in S3; the ledger keeps a pointer.

Objects are keyed by session, position and event id, so two writers racing for one position
never overwrite each other's object; the loser's object is deleted when its commit is refused.
The S3 client is built on first use: a store that never offloads never imports it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = ["POINTER", "Offloader", "is_pointer"]

#: The key of a pointer object standing in for an offloaded event in a slice's JSON array.
POINTER = "$s3"


class Offloader:
    """Puts and gets offloaded events in ``bucket`` under ``prefix``."""

    def __init__(self, bucket: str, prefix: str, client: Callable[[], S3Client]) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._make_client = client
        self._client: S3Client | None = None

    @property
    def client(self) -> S3Client:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def key(self, session_id: str, seq: int, event_id: str) -> str:
        return f"{self.prefix}{session_id}/{seq:012d}-{event_id}.json"

    def pointer(self, key: str) -> str:
        """The JSON that stands in for the event stored under ``key``."""
        return json.dumps(self.pointer_doc(key), separators=(",", ":"))

    def pointer_doc(self, key: str) -> dict[str, Any]:
        """The object that stands in for the event stored under ``key``."""
        return {POINTER: {"b": self.bucket, "k": key}}

    def put(self, key: str, text: str) -> None:
        """Store one event's JSON."""
        self.client.put_object(Bucket=self.bucket, Key=key, Body=text.encode(),
                               ContentType="application/json")

    def get(self, pointer: dict[str, Any]) -> Any:
        ref = pointer[POINTER]
        body = self.client.get_object(Bucket=ref["b"], Key=ref["k"])["Body"].read()
        return json.loads(body)

    def delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = keys[start:start + 1000]
            self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )


def is_pointer(value: Any) -> bool:
    return isinstance(value, dict) and POINTER in value and "type" not in value
