"""The ``cleanup`` function: a session's offloaded S3 objects go when its items go.

Events too large for a DynamoDB transaction are stored in the offload bucket, and the event
item that holds their place names their keys (its ``s3`` attribute: a version item ``e#v…``,
or an old layout's slice ``e#<position>``; see ``dormant.stores._dynamodb.layout``). DynamoDB
deletes expired items by TTL, and nothing else would delete those objects; so the table
streams the old image of every removed item here (``StreamViewType: OLD_IMAGE``; the event
source's filter passes only ``REMOVE`` records whose old image has ``s3`` keys under
``ledger/``, so the removals of the many items that name no object never invoke it), and this
function deletes exactly the keys the removed item named. A record that names none (delivered
by a wider filter, or by hand) is done at once.

Why that is safe for live sessions: an object's key is ``ledger/<session id>/<position>-<event
id>.json``, and the event id is new for every event, so a session created again under the same
id (after the old one expired or was deleted) writes other keys, which no removed item of the
old session names. A key that is not under its own item's session prefix is refused (nothing of
that record is deleted). Deleting a key twice is harmless, so records the store already
cleaned (``DELETE /sessions/{id}`` deletes the objects itself) and redelivered records are fine.

Each record is processed on its own (Powertools batch processing, ``ReportBatchItemFailures``):
a record that fails (a malformed image, a refused key, S3 refusing a delete) is reported in
``batchItemFailures`` and retried alone; the others are done. The bucket is versioned: a
deleted object leaves a noncurrent version, which the bucket's lifecycle rule expires.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from dormant._clients import aws_client
from dormant.aws import initialised
from dormant.settings import Settings
from dormant.stores._dynamodb import layout

__all__ = ["OFFLOAD_PREFIX", "RefusedRecord", "handler", "keys_to_delete", "record_handler"]

logger = Logger()
tracer = Tracer()
metrics = Metrics()

#: Where ``DynamoDBStore`` offloads events (its ``offload_prefix``; the role may delete only
#: under it).
OFFLOAD_PREFIX = "ledger/"
#: S3's limit of keys per ``DeleteObjects`` request.
DELETE_BATCH = 1000

settings = Settings.from_env()
processor = BatchProcessor(event_type=EventType.DynamoDBStreams,
                           raise_on_entire_batch_failure=False)
_s3: Any = None


class RefusedRecord(Exception):
    """The record names objects this function must not delete, or could not delete them."""


def _client() -> Any:
    global _s3
    if _s3 is None:  # built on the first removal that names objects, not at cold start
        _s3 = aws_client("s3")
    return _s3


def keys_to_delete(record: dict[str, Any]) -> tuple[str, list[str]]:
    """The session id and the S3 keys a ``REMOVE`` record's old image names (none for other
    records). Raises :class:`RefusedRecord` when the image is malformed or names a key outside
    its own session's prefix."""
    if record.get("eventName") != "REMOVE":
        return "", []
    image = (record.get("dynamodb") or {}).get("OldImage")
    if not isinstance(image, dict):
        raise RefusedRecord("a REMOVE record without the old image: the stream must be "
                            "OLD_IMAGE or NEW_AND_OLD_IMAGES")
    session_id = (image.get(layout.PK) or {}).get("S")
    if not isinstance(session_id, str) or not session_id:
        raise RefusedRecord("the removed item has no session id")
    keys = (image.get(layout.OFFLOADED) or {}).get("SS", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise RefusedRecord(f"session {session_id}: the removed item's offloaded keys are "
                            "malformed")
    prefix = f"{OFFLOAD_PREFIX}{session_id}/"
    foreign = [k for k in keys if not k.startswith(prefix) or "/" in k[len(prefix):]]
    if foreign:
        raise RefusedRecord(f"session {session_id}: the removed item names keys outside "
                            f"{prefix}: {foreign[:3]}; nothing of this record was deleted")
    return session_id, keys


@tracer.capture_method
def record_handler(record: DynamoDBRecord) -> None:
    """Delete the objects the removed item named; raise (the record is reported) otherwise."""
    session_id, keys = keys_to_delete(dict(record.raw_event))
    if not keys:
        return
    if not settings.bucket:
        raise RefusedRecord("DORMANT_BUCKET is not set: name the offload bucket")
    for start in range(0, len(keys), DELETE_BATCH):
        batch = keys[start:start + DELETE_BATCH]
        reply = _client().delete_objects(
            Bucket=settings.bucket,
            Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
        if reply.get("Errors"):
            codes = sorted({str(e.get("Code")) for e in reply["Errors"]})
            raise RefusedRecord(f"session {session_id}: S3 did not delete "
                                f"{len(reply['Errors'])} object(s) ({', '.join(codes)})")
    metrics.add_metric(name="OffloadedObjectsDeleted", unit=MetricUnit.Count, value=len(keys))
    logger.info("offloaded objects deleted", extra={"session_id": session_id,
                                                    "objects": len(keys)})


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """A batch of DynamoDB stream records -> ``batchItemFailures`` for the ones that failed."""
    response: dict[str, Any] = dict(process_partial_response(
        event=event, record_handler=record_handler,
        processor=processor, context=context))
    if failed := len(response.get("batchItemFailures", [])):
        metrics.add_metric(name="CleanupRecordsFailed", unit=MetricUnit.Count, value=failed)
    return response


initialised()  # last: what the cold start built is kept, collection resumes
