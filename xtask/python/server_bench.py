"""Measures what audiocpp_server adds on top of inference, for VAD and ASR requests, next to
direct audiocpp_cli runs of the same models on the same audio, in one run.

For each task it prints:
- the direct CLI run: whole process (start, model load, inference) and the inference time
  the CLI reports;
- the server, one keep-alive client sending requests back to back: client latency, the
  server's own `X-AudioCPP-Wall-Ms` (decode + inference on the model thread), the
  overhead (latency minus that wall time: HTTP, multipart, JSON, scheduling, the client),
  and requests/s;
- the server with several concurrent clients: requests/s (the model at `parallel` 1, so
  this shows queueing, not parallel inference);
- concurrency: 8 clients sending Whisper tiny.en q8_0 transcriptions of a real clip to
  the server at `parallel` 1 (one request at a time, as before parallel workers) and at
  2, 4 and 8 workers (all threads 0: every core, fitted per graph), each a fresh
  server: requests/s, p50/p99 latency, the ratio to parallel 1 and the server's peak
  RSS; then one worker decoding the waiting requests together (`batch` 4 and 8: the
  largest batch seen is printed from `X-AudioCPP-Batch`) and two workers at `batch` 4;
  then faster-whisper's
  BatchedInferencePipeline on the same CTranslate2 weights
  (int8, beam 1, batch_size 8) driven by the same 8 client threads on one model with
  8 workers, as the peer.

Usage: server_bench.py --server BIN --cli BIN --vad-model BIN --specs DIR --asr-ct2 DIR
                       --vad-audio WAV --asr-audio WAV --conc-audio WAV [--repeat N]
                       [--threads N] [--only-concurrency [--asr-q8 GGUF] [--backend cuda]
                       [--no-peer] [--per-client N]]
"""
import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import http.client
import uuid


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_runs(args, task, model, audio, repeat):
    """Whole-process wall times and the CLI's reported inference times (ms)."""
    family = "silero_vad" if task == "vad" else "whisper"
    cmd = [args.cli, "--task", task, "--family", family, "--model", model, "--audio", audio,
           "--threads", str(args.threads), "--json"]
    walls, inference = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        walls.append((time.perf_counter() - t0) * 1000)
        inference.append(json.loads(out)["inference_ms"])
    return walls, inference


def multipart(fields, audio_bytes):
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                 f'Content-Type: audio/wav\r\n\r\n'.encode() + audio_bytes + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def request(conn, task, audio_bytes, with_batch=False):
    """One request on a kept-alive connection: (latency ms, server wall ms, body), and
    with `with_batch` the requests decoded with it (`X-AudioCPP-Batch`, 1 when absent)."""
    if task == "vad":
        path, fields = "/v1/tasks/run", {"model": "vad"}
    else:
        path, fields = "/v1/audio/transcriptions", {"model": "asr", "response_format": "json"}
    body, ctype = multipart(fields, audio_bytes)
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": ctype})
    r = conn.getresponse()
    data = r.read()
    latency = (time.perf_counter() - t0) * 1000
    if r.status != 200:
        raise SystemExit(f"server answered {r.status} for {task}: {data.decode(errors='replace')}")
    out = latency, float(r.getheader("x-audiocpp-wall-ms")), json.loads(data)
    if with_batch:
        return out + (int(r.getheader("x-audiocpp-batch") or 1),)
    return out


def serve(args, config, threads=None):
    port = free_port()
    threads = args.threads if threads is None else threads
    proc = subprocess.Popen([args.server, "--config", config, "--port", str(port),
                             "--threads", str(threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"audiocpp_server exited: {proc.stderr.read().decode()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("audiocpp_server did not answer /health within 60 s")


def med(xs):
    return statistics.median(xs)


def p99(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.99 * (len(s) - 1))))]


def bench_task(args, port, task, cli_model, audio):
    audio_bytes = open(audio, "rb").read()
    walls, inference = cli_runs(args, task, cli_model, audio, args.repeat)
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    request(client, task, audio_bytes)  # warm: the first request pays one-time work
    lat, srv = [], []
    t0 = time.perf_counter()
    for _ in range(args.repeat * 4):
        latency, wall, _ = request(client, task, audio_bytes)
        lat.append(latency)
        srv.append(wall)
    seq_rps = len(lat) / (time.perf_counter() - t0)
    client.close()
    overhead = [a - b for a, b in zip(lat, srv)]

    def worker(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            return [request(c, task, audio_bytes)[0] for _ in range(n)]
        finally:
            c.close()

    clients = 4
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        conc = [x for xs in ex.map(worker, [args.repeat] * clients) for x in xs]
    conc_rps = len(conc) / (time.perf_counter() - t0)

    print(f"-- {task}: {os.path.basename(audio)}, {args.threads} thread(s)")
    print(f"   direct CLI process (start+load+run)  median {med(walls):8.1f} ms")
    print(f"   direct CLI inference (reported)      median {med(inference):8.1f} ms")
    print(f"   server latency, 1 keep-alive client  median {med(lat):8.1f} ms   p99 {p99(lat):8.1f} ms")
    print(f"   server model time (X-AudioCPP-Wall)  median {med(srv):8.1f} ms")
    print(f"   server overhead (latency - model)    median {med(overhead):8.2f} ms   p99 {p99(overhead):8.2f} ms"
          f"   (target < 5 ms: {'met' if med(overhead) < 5 else 'NOT met'})")
    print(f"   latency - direct CLI inference       median {med(lat) - med(inference):8.2f} ms")
    print(f"   requests/s: 1 client {seq_rps:7.2f}, {clients} clients {conc_rps:7.2f} "
          f"(p50 {med(conc):.1f} ms, p99 {p99(conc):.1f} ms); direct CLI {1000 / med(walls):7.2f}/s"
          f" -> server is {med(walls) / med(lat):.1f}x the CLI's rate")


CLIENTS = 8


def peak_rss_mb(pid):
    """The process's peak resident memory (VmHWM) in MB; None where /proc has none."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def eight_clients(one, per_client):
    """Runs `one()` (returns its latency in ms) per_client times on each of 8 client
    threads at once: (requests/s, latencies)."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as ex:
        lats = [x for xs in ex.map(lambda _: [one() for _ in range(per_client)], range(CLIENTS))
                for x in xs]
    return len(lats) / (time.perf_counter() - t0), lats


def bench_parallel(args, tmp):
    """8 clients against the server at parallel 1, 2, 4, 8, at batch 4 and 8 on one
    worker and at batch 4 on two, then faster-whisper."""
    q8 = args.asr_q8 or os.path.join(tmp, "whisper-tiny.en-q8_0.gguf")
    if not args.asr_q8:
        subprocess.run([args.cli, "--task", "convert", "--family", "whisper", "--model",
                        args.asr_ct2, "--quantize", "q8_0", "--out", q8],
                       check=True, capture_output=True)
    audio_bytes = open(args.conc_audio, "rb").read()
    per_client = args.per_client or max(2, args.repeat // 2)
    print(f"== bench server concurrency: {CLIENTS} clients x {per_client} transcriptions of "
          f"{os.path.basename(args.conc_audio)}, Whisper tiny.en q8_0, {os.cpu_count()} cores, "
          f"threads 0 (all, fitted per graph), backend {args.backend}")
    print(f"   {'':34} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'x p=1':>6} {'peak RSS':>9}")
    base, texts = None, set()
    for parallel, batch in [(1, 1), (2, 1), (4, 1), (8, 1), (1, 4), (1, 8), (2, 4)]:
        config = os.path.join(tmp, f"parallel{parallel}-batch{batch}.json")
        with open(config, "w") as f:
            json.dump({"busy_timeout_ms": 600000, "backend": args.backend, "models": [
                {"id": "asr", "path": q8, "family": "whisper", "task": "asr",
                 "parallel": parallel, "batch": batch}]}, f)
        largest = [0]
        proc, port = serve(args, config, threads=0)
        try:
            local = __import__("threading").local()

            def one():
                if not hasattr(local, "conn"):
                    local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                latency, _, body, batched = request(local.conn, "asr", audio_bytes, with_batch=True)
                texts.add(body["text"])
                largest[0] = max(largest[0], batched)
                return latency

            one()  # warm: the first request pays one-time work
            rps, lats = eight_clients(one, per_client)
            rss = peak_rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        base = base or rps
        rss_text = f"{rss:7.0f} MB" if rss is not None else "      n/a"
        label = ("audiocpp_server parallel 1 (before)" if (parallel, batch) == (1, 1)
                 else f"audiocpp_server parallel {parallel}" if batch == 1
                 else f"audiocpp_server batch {batch} (largest {largest[0]})" if parallel == 1
                 else f"audiocpp_server parallel {parallel} x batch {batch} (largest {largest[0]})")
        print(f"   {label:34} {rps:7.2f} {med(lats):8.0f} {p99(lats):8.0f} {rps / base:5.2f}x {rss_text}")
    print(f"   transcripts: {'one text for every request and setting' if len(texts) == 1 else f'{len(texts)} different texts: {sorted(texts)}'}")
    if args.no_peer:
        return
    try:
        import resource
        from faster_whisper import BatchedInferencePipeline, WhisperModel
    except ImportError as e:
        print(f"   faster-whisper BatchedInferencePipeline: not run ({e})")
        return
    model = WhisperModel(args.asr_ct2, device="cpu", compute_type="int8",
                         cpu_threads=os.cpu_count(), num_workers=CLIENTS)
    pipe = BatchedInferencePipeline(model)

    def fw_one():
        t0 = time.perf_counter()
        segments, _ = pipe.transcribe(args.conc_audio, language="en", beam_size=1, batch_size=8)
        "".join(s.text for s in segments)
        return (time.perf_counter() - t0) * 1000

    fw_one()
    rps, lats = eight_clients(fw_one, per_client)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"   {'faster-whisper batched (int8)':34} {rps:7.2f} {med(lats):8.0f} {p99(lats):8.0f} "
          f"{rps / base:5.2f}x {rss:6.0f} MB (driver process)")


def main():
    ap = argparse.ArgumentParser()
    for a in ["--server", "--cli", "--vad-model", "--specs", "--asr-ct2", "--vad-audio", "--asr-audio",
              "--conc-audio"]:
        ap.add_argument(a, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only-concurrency", action="store_true",
                    help="run just the concurrency section")
    ap.add_argument("--asr-q8", help="the concurrency section's tiny.en q8_0 GGUF (made from "
                    "--asr-ct2 when not given)")
    ap.add_argument("--backend", default="cpu", help="the concurrency section's server backend")
    ap.add_argument("--no-peer", action="store_true", help="leave faster-whisper out")
    ap.add_argument("--per-client", type=int, default=0,
                    help="the concurrency section's requests per client (default: half of "
                         "--repeat, at least 2; a GPU answers 16 in well under a second)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only_concurrency:
            bench_parallel(args, tmp)
            return
        vad = os.path.join(tmp, "silero.gguf")
        asr = os.path.join(tmp, "whisper-tiny.en.gguf")
        subprocess.run([args.cli, "--task", "convert", "--family", "silero_vad", "--model", args.vad_model,
                        "--model-spec-override", args.specs, "--out", vad], check=True, capture_output=True)
        subprocess.run([args.cli, "--task", "convert", "--family", "whisper", "--model", args.asr_ct2,
                        "--out", asr], check=True, capture_output=True)
        config = os.path.join(tmp, "server.json")
        with open(config, "w") as f:
            json.dump({"busy_timeout_ms": 600000, "models": [
                {"id": "vad", "path": vad, "family": "silero_vad", "task": "vad"},
                {"id": "asr", "path": asr, "family": "whisper", "task": "asr", "parallel": 1}]}, f)
        proc, port = serve(args, config)
        try:
            print(f"== bench server: audiocpp_server vs direct audiocpp_cli runs ({args.repeat * 4} requests each)")
            bench_task(args, port, "vad", vad, args.vad_audio)
            bench_task(args, port, "asr", asr, args.asr_audio)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        bench_parallel(args, tmp)


if __name__ == "__main__":
    sys.exit(main())
