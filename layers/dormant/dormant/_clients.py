"""AWS clients, made without importing boto3.

boto3 is not needed for the library's own clients: what it adds (resources, S3's transfer
methods) the library does not call, and importing it imports s3transfer, ``multiprocessing``
and ``concurrent.futures`` too, a good part of a Lambda cold start. So while boto3 is not
loaded, every client comes from one botocore session of this module's (endpoint data and
handlers load once per process). Once something has imported boto3 (the app, a test kit
such as moto, whose ``mock_aws`` resets boto3's default session), clients come from
``boto3.client`` as before, so they follow boto3's default session. Either way, creating a
client reads the environment (``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_*``,
credentials) and opens no connection: a client made during a SnapStart snapshot's
initialisation holds no socket.

The session's data loader skips botocore's check that a service name is one it knows: that
check lists every service's folder (some 900 directory reads, a fifth of a first client's
creation at a cold start) for names the library itself spells; a misspelt one still fails, as
the loader does not find its model.

Users who pass clients of their own (``DynamoDBStore(table, client=boto3.client(...))``)
keep them: this is only how the library makes the ones nobody gave it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["aws_client"]

_lock = threading.Lock()
_session: Any = None


def aws_client(service: str, *, region_name: str | None = None, **config: Any) -> Any:
    """A client for ``service``; ``config`` are ``botocore.config.Config`` options
    (``retries``, ``connect_timeout``, ``read_timeout``, ...). Safe from any thread: botocore
    sessions are not, so client creation is serialised (clients themselves are safe)."""
    from botocore.config import Config

    settings = Config(**config) if config else None
    global _session
    with _lock:
        boto3 = sys.modules.get("boto3")
        if boto3 is not None:  # loaded anyway: its default session, as boto3.client() uses
            return boto3.client(service, region_name=region_name, config=settings)
        if _session is None:
            _session = _new_session()
        return _session.create_client(service, region_name=region_name, config=settings)


def _new_session() -> Any:
    """A botocore session whose loader takes service names on trust (see the module's doc)."""
    from botocore.loaders import Loader
    from botocore.session import Session

    class TrustingLoader(Loader):
        def list_available_services(self, type_name: str) -> Any:
            return _EVERY_NAME

    session = Session()
    paths = session.get_config_variable("data_path")  # AWS_DATA_PATH, as botocore reads it
    extra = None if paths is None else [os.path.expanduser(os.path.expandvars(path))
                                        for path in paths.split(os.pathsep)]
    session.register_component("data_loader", TrustingLoader(extra_search_paths=extra))
    return session


class _EveryName:
    """What the loader answers when asked which services it has: all of them."""

    def __contains__(self, name: object) -> bool:
        return True


_EVERY_NAME = _EveryName()
