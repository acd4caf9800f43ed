"""AWS clients, all made from one botocore session.

boto3 is not needed for the library's own clients: what it adds (resources, S3's transfer
methods) the library does not call, and importing it imports s3transfer, ``multiprocessing``
and ``concurrent.futures`` too, a good part of a Lambda cold start. One session for every
client means botocore's endpoint data and handlers load once per process. Creating a
client reads the environment (``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_*``,
credentials) as boto3's would, and opens no connection: a client made during a SnapStart
snapshot's initialisation holds no socket.

Users who pass clients of their own (``DynamoDBStore(table, client=boto3.client(...))``)
keep them: this is only how the library makes the ones nobody gave it.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["aws_client"]

_lock = threading.Lock()
_session: Any = None


def aws_client(service: str, *, region_name: str | None = None, **config: Any) -> Any:
    """A botocore client for ``service``; ``config`` are ``botocore.config.Config`` options
    (``retries``, ``connect_timeout``, ``read_timeout``, ...). Safe from any thread: botocore
    sessions are not, so client creation is serialised (clients themselves are safe)."""
    from botocore.config import Config
    from botocore.session import Session

    global _session
    with _lock:
        if _session is None:
            _session = Session()
        return _session.create_client(service, region_name=region_name,
                                      config=Config(**config) if config else None)
