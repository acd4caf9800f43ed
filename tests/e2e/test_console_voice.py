"""The console's voice session in real Chromium: its microphone is a WAV espeak-ng spoke
(Chromium's fake capture device), the page records it with MediaRecorder, posts it to ``POST
/voice`` on a real ``dormant dev`` and plays the spoken reply. OpenAI is a local fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.audio_fake import FakeAudioAPI, fake_audio_api, spoken_wav

from .conftest import DevServer, voice_dev_server
from .test_console import CHROMIUM, CHROMIUM_ARGS, WAIT

SAID = "Book me a room for Friday."
REPLY = "Your room is booked for Friday."


@pytest.fixture
def fake() -> Iterator[FakeAudioAPI]:
    # the browser's recording: its bytes are the browser's own
    with fake_audio_api(REPLY, hears_any=SAID) as api:
        yield api


@pytest.fixture
def voice_server(tmp_path: Path, fake: FakeAudioAPI) -> Iterator[DevServer]:
    with voice_dev_server(tmp_path / "voice.db", fake.base_url) as server:
        yield server


def test_the_console_records_sends_and_plays_a_voice_turn(
        tmp_path: Path, voice_server: DevServer, fake: FakeAudioAPI) -> None:
    microphone = tmp_path / "microphone.wav"
    microphone.write_bytes(spoken_wav("book me a room for friday"))
    args = [*CHROMIUM_ARGS, "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={microphone}",
            "--autoplay-policy=no-user-gesture-required"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            context = browser.new_context(base_url=voice_server.url,
                                          permissions=["microphone"])
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            # what the page plays: every <audio> it starts, with its source
            page.add_init_script("""
                window.__played = [];
                const play = HTMLMediaElement.prototype.play;
                HTMLMediaElement.prototype.play = function () {
                  window.__played.push(this.src.slice(0, 40));
                  return play.call(this);
                };""")
            page.goto("/#/sessions/session_spoken-console")
            speak = page.get_by_role("button", name="Speak")
            expect(speak).to_be_visible()
            speak.click()
            stop = page.get_by_role("button", name="Stop and send")
            expect(stop).to_be_visible()
            page.wait_for_timeout(1500)  # let the fake microphone speak a while
            stop.click()

            expect(page.get_by_text(f"You said: “{SAID}”.")).to_be_visible(timeout=WAIT)
            timeline = page.get_by_role("list", name="Timeline")
            expect(timeline).to_contain_text(REPLY, timeout=WAIT)
            expect(timeline).to_contain_text("user (spoken)")
            played = page.evaluate("window.__played")
            assert played and played[0].startswith("data:audio/wav;base64,UklGR"), played
            assert not errors, errors
            context.close()
        finally:
            browser.close()
    transcribed = next(r for r in fake.requests if r.path.endswith("/transcriptions"))
    assert transcribed.file_name in ("audio.webm", "audio.ogg", "audio.m4a")
    assert transcribed.file_bytes > 1000  # the browser's recording arrived
    view = httpx.get(f"{voice_server.url}/sessions/spoken-console", params={"events": "true"},
                     timeout=30).json()
    users = [e for e in view["events"] if e["type"] == "user"]
    assert [(u["text"], u.get("audio")) for u in users] == [(SAID, True)]
