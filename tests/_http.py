"""Driving the HTTP resolver in-process: an API Gateway REST proxy event, and its JSON answer."""

from __future__ import annotations

import json
from typing import Any


def get(resolver: Any, path: str) -> tuple[int, Any]:
    """``GET path`` as API Gateway passes it with no authorizer: the status and the JSON body."""
    out = resolver.resolve({
        "resource": path, "path": path, "httpMethod": "GET", "headers": {},
        "multiValueHeaders": {}, "queryStringParameters": None,
        "multiValueQueryStringParameters": None, "pathParameters": None,
        "stageVariables": None, "body": None, "isBase64Encoded": False,
        "requestContext": {"resourcePath": path, "httpMethod": "GET", "path": path,
                           "stage": "test", "requestId": "r-1", "authorizer": {},
                           "identity": {}},
    }, None)
    return out["statusCode"], json.loads(out["body"])
