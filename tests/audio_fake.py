"""A local stand-in for OpenAI's audio APIs (and a Responses API reply, so an agent served by
``OpenAIModel`` can run beside them): a real HTTP server on 127.0.0.1, never a real key.

- ``POST /v1/audio/transcriptions`` reads the multipart form the official client sends, checks
  the file is real audio (``soxi -D`` > 0, or a WebM container, which sox cannot read) and
  answers ``{"text": ...}``: the words the test said were spoken in it (``hears(wav, text)``;
  the fake cannot listen, it recognises audio by its bytes), or, for audio recorded where the
  test cannot know its bytes (a browser's microphone), ``hears_any(text)``.
- ``POST /v1/audio/speech`` answers a real WAV that ``espeak-ng`` speaks of its ``input``
  (only ``response_format: wav``: a request for anything else is refused, so a test cannot
  pass on audio it did not ask for).
- ``POST /v1/responses`` streams ``reply`` as the Responses API does (the builders of
  ``tests/unit/openai_fake.py``, validated against the client's own types).

``fail("transcriptions" | "speech", status)`` makes the next such call fail as OpenAI does.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.unit.openai_fake import responses_stream

__all__ = ["FakeAudioAPI", "audio_seconds", "audio_type", "fake_audio_api", "spoken_wav"]


def spoken_wav(text: str) -> bytes:
    """``text`` spoken by espeak-ng, as WAV bytes."""
    with tempfile.TemporaryDirectory(prefix="dormant-voice-") as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True,
                       timeout=60)
        return path.read_bytes()


def audio_seconds(data: bytes, kind: str = "wav") -> float:
    """The duration ``soxi -D`` reads from audio bytes (0.0: sox cannot read them)."""
    with tempfile.TemporaryDirectory(prefix="dormant-voice-") as tmp:
        path = Path(tmp) / f"audio.{kind}"
        path.write_bytes(data)
        done = subprocess.run(["soxi", "-D", str(path)], capture_output=True, text=True,
                              timeout=60)
        return float(done.stdout.strip() or 0) if done.returncode == 0 else 0.0


def audio_type(data: bytes, kind: str = "wav") -> str:
    """The file type ``soxi -t`` reads from audio bytes."""
    with tempfile.TemporaryDirectory(prefix="dormant-voice-") as tmp:
        path = Path(tmp) / f"audio.{kind}"
        path.write_bytes(data)
        done = subprocess.run(["soxi", "-t", str(path)], capture_output=True, text=True,
                              timeout=60, check=True)
        return done.stdout.strip()


@dataclass
class Heard:
    """One request the fake answered."""

    path: str
    fields: dict[str, str] = field(default_factory=dict)
    file_name: str | None = None
    file_type: str | None = None
    file_bytes: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    authorization: str = ""


class FakeAudioAPI:
    """``base_url`` for a client (``.../v1``); ``requests`` holds what arrived."""

    def __init__(self, reply: str = "Booked for Friday.") -> None:
        self.reply = reply
        self.requests: list[Heard] = []
        self._known: dict[str, str] = {}
        self._any: str | None = None
        self._failures: dict[str, list[int]] = {"transcriptions": [], "speech": []}
        self._lock = threading.Lock()
        fake = self

        class Handler(_Handler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def hears(self, audio: bytes, text: str) -> bytes:
        """Say that ``audio`` holds ``text`` (what the transcription answers for it)."""
        with self._lock:
            self._known[hashlib.sha256(audio).hexdigest()] = text
        return audio

    def hears_any(self, text: str) -> None:
        """Answer ``text`` for real audio whose bytes the test could not know."""
        with self._lock:
            self._any = text

    def fail(self, api: str, status: int = 500) -> None:
        """The next call to ``api`` (``transcriptions`` or ``speech``) answers ``status``."""
        with self._lock:
            self._failures[api].append(status)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _record(self, heard: Heard) -> int | None:
        with self._lock:
            self.requests.append(heard)
            api = heard.path.rsplit("/", 1)[-1]
            failures = self._failures.get(api)
            return failures.pop(0) if failures else None

    def _heard(self, audio: bytes) -> str | None:
        with self._lock:
            return self._known.get(hashlib.sha256(audio).hexdigest(), self._any)


@contextmanager
def fake_audio_api(reply: str = "Booked for Friday.", *, hears: tuple[bytes, str] | None = None,
                   hears_any: str | None = None) -> Iterator[FakeAudioAPI]:
    """A running :class:`FakeAudioAPI` that answers ``hears`` (audio, its text) or, for any
    real audio, ``hears_any``; closed on exit."""
    fake = FakeAudioAPI(reply)
    if hears is not None:
        fake.hears(*hears)
    if hears_any is not None:
        fake.hears_any(hears_any)
    try:
        yield fake
    finally:
        fake.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeAudioAPI

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        authorization = self.headers.get("authorization", "")
        if path.endswith("/audio/transcriptions"):
            self._transcribe(raw, authorization)
        elif path.endswith("/audio/speech"):
            self._speak(json.loads(raw or b"{}"), authorization)
        elif path.endswith("/responses"):
            self.owner._record(Heard(path, body=json.loads(raw or b"{}"),
                                     authorization=authorization))
            self._stream(responses_stream(self.owner.reply).events or [])
        else:
            self._error(404, f"no route {path}")

    def _transcribe(self, raw: bytes, authorization: str) -> None:
        form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + self.headers.get("content-type", "").encode() + b"\r\n\r\n"
            + raw)
        heard = Heard("/v1/audio/transcriptions", authorization=authorization)
        audio = b""
        for part in form.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            if name == "file":
                heard.file_name = part.get_filename()
                heard.file_type = part.get_content_type()
                heard.file_bytes, audio = len(payload), payload
            elif isinstance(name, str):
                heard.fields[name] = payload.decode()
        failure = self.owner._record(heard)
        if failure is not None:
            self._error(failure, "the transcription service failed", kind="server_error")
            return
        suffix = (heard.file_name or "audio.wav").rsplit(".", 1)[-1]
        webm = audio.startswith(b"\x1a\x45\xdf\xa3")  # an EBML (WebM/Matroska) header
        if not audio or not (webm or audio_seconds(audio, suffix) > 0):
            self._error(400, "the file is not audio this server can read")
            return
        text = self.owner._heard(audio)
        if text is None:
            self._error(400, "the fake cannot tell what this audio says (hears() it first)")
            return
        self._json(200, {"text": text})

    def _speak(self, body: dict[str, Any], authorization: str) -> None:
        failure = self.owner._record(Heard("/v1/audio/speech", body=body,
                                           authorization=authorization))
        if failure is not None:
            self._error(failure, "the speech service failed", kind="server_error")
            return
        if body.get("response_format") != "wav" or not body.get("input"):
            self._error(400, "this fake speaks WAV only, and needs input")
            return
        data = spoken_wav(str(body["input"]))
        self.send_response(200)
        self.send_header("content-type", "audio/wav")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        data = "".join((f"event: {name}\n" if name else "") + f"data: {json.dumps(body)}\n\n"
                       for name, body in events).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None,
                                      "code": None}})

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
