"""Driving the HTTP resolver in-process (an API Gateway REST proxy event, and its answer), and
a server over a plain HTTP connection (:func:`raw_request`)."""

from __future__ import annotations

import http.client
import json
from typing import Any


def raw_request(url: str, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None
                ) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``method path`` sent to the server at ``url`` as written (any method, any ``Host``
    header given): its status, JSON body ({} when empty) and headers (lower-case names)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers={
            "Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else {}, {
            k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


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


def post_event(path: str, body: Any) -> dict[str, Any]:
    """``POST path`` with a JSON body, as API Gateway passes it with no authorizer."""
    return {
        "resource": path, "path": path, "httpMethod": "POST",
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None,
        "requestContext": {"resourcePath": path, "httpMethod": "POST", "path": path,
                           "stage": "test", "requestId": "r-1", "authorizer": {},
                           "identity": {}},
        "body": json.dumps(body), "isBase64Encoded": False,
    }


def post(resolver: Any, path: str, body: Any) -> tuple[int, Any]:
    """``POST path``: the status and the body (parsed when it is JSON)."""
    out = resolver.resolve(post_event(path, body), None)
    text = out["body"]
    return out["statusCode"], json.loads(text) if text.startswith("{") else text
