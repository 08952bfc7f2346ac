"""Times audiocpp_cli's Qwen3-TTS against the official code (qwen-tts 0.1.1 in PyTorch) on
the full-size 1.7B CustomVoice architecture with random weights, in one run: our GGUF in
f16 and q8_0 and the official model (float32 on the CPU, bfloat16 on CUDA), a fixed
number of frames (random weights seldom stop on their own; --frames, 132 = 10.56 s),
each configuration's runs alternated with the others. Prints the real-time factor
(synthesis time / audio duration, model loading excluded on both sides), the ratio
against the official code at the same thread count, and peak RSS.

Usage: qwen3_tts_bench.py --cli PATH --checkpoint DIR --gguf-f16 GGUF --gguf-q8_0 GGUF
                          [--threads 1,2] [--frames 132] [--repeat N] [--backend cpu|cuda]
The official side runs xtask/python/qwen3_tts_fixtures.py --time in this interpreter,
which needs torch, transformers 4.57.3 and qwen-tts 0.1.1 (qwen3_tts_requirements.txt).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = "Speech synthesis on the CPU is being timed with a fixed number of frames."


def run(cmd):
    """Runs `cmd` once; returns its JSON output and its own peak RSS in MiB (from wait4)."""
    import tempfile
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        out = proc.stdout.read().decode()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{cmd[0]} failed: {err.read().decode(errors='replace')[-2000:]}")
    return json.loads(out[out.find("{"):]), usage.ru_maxrss / 1024


def ours(args, gguf, threads):
    cmd = [args.cli, "--task", "tts", "--family", "qwen3_tts", "--model", gguf, "--text", TEXT,
           "--voice", args.voice, "--language", "english", "--max-frames", str(args.frames),
           "--temperature", "0", "--threads", str(threads), "--backend", args.backend,
           "--out", os.devnull, "--json"]
    result, peak = run(cmd)
    return result["inference_ms"] / 1000 / result["audio_seconds"], result["audio_seconds"], peak


def official(args, threads):
    dtype = "bfloat16" if args.backend == "cuda" else "float32"
    cmd = [sys.executable, os.path.join(HERE, "qwen3_tts_fixtures.py"), "--time", args.checkpoint,
           "--threads", str(threads), "--frames", str(args.frames), "--dtype", dtype,
           "--device", args.backend, "--text", TEXT]
    result, peak = run(cmd)
    return result["rtf"], result["audio_seconds"], peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--gguf-f16", required=True)
    ap.add_argument("--gguf-q8_0", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--frames", type=int, default=132)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--voice", default="aiden", help="a speaker of the checkpoint (the full-size one has the release's)")
    args = ap.parse_args()
    print(f"Qwen3-TTS-12Hz 1.7B CustomVoice architecture, random weights, {args.frames} frames, "
          f"backend {args.backend}; RTF = synthesis time / audio seconds (lower is faster)")
    print(f"{'configuration':34} {'threads':>7} {'audio s':>8} {'RTF':>8} {'vs official':>12} {'peak RSS MiB':>13}")
    for threads in [int(t) for t in args.threads.split(",")]:
        configs = [
            ("official qwen-tts (PyTorch)", lambda: official(args, threads)),
            ("audiocpp f16", lambda: ours(args, args.gguf_f16, threads)),
            ("audiocpp q8_0", lambda: ours(args, args.gguf_q8_0, threads)),
        ]
        times = {name: [] for name, _ in configs}
        audio = {}
        rss = {}
        for _ in range(args.repeat):
            for name, f in configs:
                r, a, peak = f()
                times[name].append(r)
                audio[name] = a
                rss[name] = max(rss.get(name, 0), peak)
        base = statistics.median(times[configs[0][0]])
        for name, _ in configs:
            med = statistics.median(times[name])
            print(f"{name:34} {threads:>7} {audio[name]:>8.2f} {med:>8.3f} {base / med:>11.2f}x {rss[name]:>13.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
