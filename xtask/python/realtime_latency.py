"""Measures live transcription's latency (docs/server.md, "Live transcription"): streams a
16-bit WAV to a running audiocpp_server's /v1/realtime?intent=transcription in 100 ms
messages at real-time pace (24 kHz PCM16, as OpenAI's clients send) and reports, per
turn, how long after the speech started (the server's `speech_started` time plus the
prefix padding) the first delta arrived, and how long after the speech stopped the
`completed` event arrived. A plain WebSocket client over the standard library, so it
needs nothing but numpy.

Usage: realtime_latency.py --url ws://127.0.0.1:PORT --wav FILE [--model ID] [--key KEY]
"""
import argparse
import base64
import json
import os
import socket
import struct
import threading
import time
import wave
from urllib.parse import urlparse

import numpy as np

PREFIX_MS = 300  # the server VAD's default prefix padding


def connect(url, path, key):
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port or 80))
    nonce = base64.b64encode(os.urandom(16)).decode()
    head = [f"GET {path} HTTP/1.1", f"Host: {u.hostname}:{u.port}", "Upgrade: websocket",
            "Connection: Upgrade", f"Sec-WebSocket-Key: {nonce}", "Sec-WebSocket-Version: 13"]
    if key:
        head.append(f"Authorization: Bearer {key}")
    s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += s.recv(1)
    if b" 101 " not in reply.split(b"\r\n")[0]:
        raise SystemExit(f"no upgrade: {reply.decode(errors='replace')}")
    return s


def send_text(s, text):
    data = text.encode()
    mask = os.urandom(4)
    n = len(data)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    s.sendall(head + mask + body)


def read_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def read_frames(s, events):
    try:
        while True:
            b0, b1 = read_exact(s, 2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", read_exact(s, 2))[0]
            elif n == 127:
                n = struct.unpack("!Q", read_exact(s, 8))[0]
            payload = read_exact(s, n)
            if b0 & 0x0F == 0x1:
                events.append((time.monotonic(), json.loads(payload)))
            elif b0 & 0x0F == 0x8:
                return
    except (EOFError, OSError):
        return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--model")
    ap.add_argument("--key")
    ap.add_argument("--lead-s", type=float, default=0.0, help="silence sent before the clip")
    args = ap.parse_args()
    with wave.open(args.wav) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float64)
    n24 = int(len(pcm) * 24000 / rate)
    pcm24 = np.interp(np.arange(n24) * rate / 24000, np.arange(len(pcm)), pcm)
    # Two seconds of silence after the speech so the last turn ends.
    lead = np.zeros(int(24000 * args.lead_s))
    pcm24 = np.concatenate([lead, pcm24, np.zeros(24000 * 2)]).astype(np.int16)
    path = "/v1/realtime?intent=transcription" + (f"&model={args.model}" if args.model else "")
    s = connect(args.url, path, args.key)
    events = []
    reader = threading.Thread(target=read_frames, args=(s, events), daemon=True)
    reader.start()
    step = 2400  # 100 ms at 24 kHz
    t0 = time.monotonic()
    for i, at in enumerate(range(0, len(pcm24), step)):
        chunk = pcm24[at:at + step].tobytes()
        send_text(s, json.dumps({"type": "input_audio_buffer.append",
                                 "audio": base64.b64encode(chunk).decode()}))
        delay = t0 + (i + 1) * 0.1 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        started = sum(1 for _, e in events if e["type"] == "input_audio_buffer.speech_started")
        done = sum(1 for _, e in events
                   if e["type"] == "conversation.item.input_audio_transcription.completed")
        if started and done >= started:
            break
        time.sleep(0.1)
    s.close()
    turns = {}
    for t, e in events:
        item = e.get("item_id")
        if item is None:
            continue
        turn = turns.setdefault(item, {})
        kind = e["type"]
        if kind == "input_audio_buffer.speech_started":
            turn["speech_at"] = t0 + (e["audio_start_ms"] + PREFIX_MS) / 1000
            turn["start_ms"] = e["audio_start_ms"]
        elif kind == "input_audio_buffer.speech_stopped":
            turn["stop_at"] = t0 + e["audio_end_ms"] / 1000
            turn["end_ms"] = e["audio_end_ms"]
        elif kind.endswith("transcription.delta"):
            turn.setdefault("first_delta", t)
            turn["deltas"] = turn.get("deltas", 0) + 1
        elif kind.endswith("transcription.completed"):
            turn["completed"] = t
            turn["text"] = e["transcript"]
    for item, turn in turns.items():
        if "speech_at" not in turn:
            continue
        first = turn.get("first_delta")
        print(json.dumps({
            "item": item,
            "first_delta_after_speech_s": round(first - turn["speech_at"], 2) if first else None,
            "completed_after_stop_s": round(turn["completed"] - turn["stop_at"], 2)
            if "completed" in turn and "stop_at" in turn else None,
            "deltas": turn.get("deltas", 0),
            "speech_ms": [turn.get("start_ms"), turn.get("end_ms")],
            "text": turn.get("text"),
        }))


if __name__ == "__main__":
    main()
