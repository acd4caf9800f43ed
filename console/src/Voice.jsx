// Talk to the session: record with the microphone (MediaRecorder), send it to POST /voice,
// play the spoken reply. The turn lands in the timeline like any other (the feed brings it).
import { useRef, useState } from "preact/hooks";
import { postVoice } from "./api.js";

const MEDIA = { wav: "audio/wav", mp3: "audio/mpeg", opus: "audio/ogg", aac: "audio/aac", flac: "audio/flac" };

export function VoiceButton({ sessionId, disabled, onNotice, onDone }) {
  const [state, setState] = useState("idle"); // idle | recording | sending
  const recorder = useRef(null);
  const supported = typeof window !== "undefined" && "MediaRecorder" in window && navigator.mediaDevices?.getUserMedia;

  const start = async () => {
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const chunks = [];
      const rec = new MediaRecorder(stream);
      rec.ondataavailable = (event) => { if (event.data.size) chunks.push(event.data); };
      rec.onstop = () => {
        stream.getTracks().forEach((track) => track.stop());
        send(new Blob(chunks, { type: rec.mimeType || "audio/webm" }));
      };
      recorder.current = rec;
      rec.start();
      setState("recording");
    } catch (error) {
      onNotice({ kind: "error", text: `The microphone is not available: ${error.message || error}` });
    }
  };

  const send = async (blob) => {
    setState("sending");
    try {
      const reply = await postVoice(sessionId, blob);
      const heard = reply.transcript ? `You said: “${reply.transcript}”.` : "";
      if (reply.audio) {
        const type = MEDIA[reply.audio.format] || "audio/wav";
        new Audio(`data:${type};base64,${reply.audio.data}`).play().catch(() => {});
        onNotice({ kind: "info", text: heard });
      } else {
        onNotice({ kind: reply.audioError ? "error" : "info", text: `${heard} ${reply.audioError || "The reply has nothing to say aloud."}` });
      }
    } catch (error) {
      onNotice({ kind: "error", text: error.message || String(error) });
    } finally {
      setState("idle");
      onDone();
    }
  };

  if (!supported) return null;
  const recording = state === "recording";
  return (
    <button type="button" class="secondary voice" aria-pressed={recording} disabled={disabled || state === "sending"}
      onClick={() => (recording ? recorder.current?.stop() : start())}>
      {recording ? "Stop and send" : state === "sending" ? "Listening…" : "Speak"}
    </button>
  );
}
