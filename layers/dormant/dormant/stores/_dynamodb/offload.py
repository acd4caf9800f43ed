"""Events too large for a DynamoDB transaction live in S3; the ledger keeps a pointer.

Objects are keyed by session, position and event id, so two writers racing for one position
never overwrite each other's object; the loser's object is deleted when its commit is refused.
The S3 client is built on first use: a store that never offloads never imports it.

The pointer carries a stub (the event's type and id): a load that only needs the head and the
window's shape leaves the body in S3, and reads it when something reads the event
(:func:`stand_in`). An object is never written twice under one key, so what a process has read
or wrote it keeps (up to :data:`BODY_CACHE_BYTES`): a warm process's next turn of the session
reads it from memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from dormant._lru import Lru
from dormant.errors import StoreError
from dormant.events import Event, event_class

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = ["BODY_CACHE_BYTES", "POINTER", "Offloader", "is_pointer", "stand_in"]

#: The key of a pointer object standing in for an offloaded event in a slice's JSON array.
POINTER = "$s3"
#: The stub's keys beside the pointer: the event's type and id (pointers written before the
#: stub have neither: their events are read at once).
_TYPE, _ID = "t", "i"
#: Offloaded bodies a process keeps once read (bytes of JSON).
BODY_CACHE_BYTES = 8 << 20


class Offloader:
    """Puts and gets offloaded events in ``bucket`` under ``prefix``."""

    def __init__(self, bucket: str, prefix: str, client: Callable[[], S3Client]) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._make_client = client
        self._client: S3Client | None = None
        self._bodies: Lru[bytes] = Lru(BODY_CACHE_BYTES, len)

    @property
    def client(self) -> S3Client:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def key(self, session_id: str, seq: int, event_id: str) -> str:
        return f"{self.prefix}{session_id}/{seq:012d}-{event_id}.json"

    def pointer_doc(self, key: str, event: dict[str, Any]) -> dict[str, Any]:
        """The object that stands in for ``event`` (its JSON form), stored under ``key``."""
        return {POINTER: {"b": self.bucket, "k": key}, _TYPE: event["type"], _ID: event["id"]}

    def put(self, key: str, text: str) -> None:
        """Store one event's JSON (and keep it: the object under ``key`` never changes)."""
        body = text.encode()
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body,
                               ContentType="application/json")
        self._bodies.put(f"{self.bucket}/{key}", body)

    def get(self, pointer: dict[str, Any]) -> Any:
        """The JSON of the event ``pointer`` stands in for."""
        ref = pointer[POINTER]
        cached = f"{ref['b']}/{ref['k']}"
        body = self._bodies.get(cached)
        if body is None:
            try:
                body = self.client.get_object(Bucket=ref["b"], Key=ref["k"])["Body"].read()
            except (BotoCoreError, ClientError) as error:
                raise StoreError(f"could not read the event stored as s3://{cached}: "
                                 f"{error}") from error
            self._bodies.put(cached, body)
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


def stand_in(pointer: dict[str, Any]) -> Event | None:
    """What a load holds in an offloaded event's place until it is read: an event of the
    stub's type and id with no other field set (None: a pointer written before stubs)."""
    kind, event_id = pointer.get(_TYPE), pointer.get(_ID)
    cls = event_class(kind) if isinstance(kind, str) else None
    if cls is None or not isinstance(event_id, str):
        return None
    event = cls.model_construct(id=event_id)
    kept = {"id": event_id, "type": kind}
    event.__dict__.clear()
    event.__dict__.update(kept)
    return cast(Event, event)
