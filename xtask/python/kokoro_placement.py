"""Kokoro on a GPU backend with two CLIs side by side (one built before a placement
change, one after, beside the same ggml libraries): the time of the 60 s text,
alternated run by run, whether the two wav files are the same bytes, and ggml's split
listing of "Hi." (GGML_SCHED_DEBUG=2) for each.

    python3 kokoro_placement.py --old CLI --new CLI --model kokoro-q8_0.gguf [--backend vulkan]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

from gpu_bench import KOKORO_TEXT


def tts(args, cli, text, wav, env=None):
    r = subprocess.run([cli, "--task", "tts", "--family", "kokoro", "--model", args.model,
                        "--text", text, "--voice", "af_heart", "--backend", args.backend,
                        "--out", wav, "--json"],
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode:
        sys.exit(f"{cli} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args()
    clis = {"old": args.old, "new": args.new}
    tmp = tempfile.mkdtemp()
    times = {k: [] for k in clis}
    for rep in range(args.runs):
        for k in ("old", "new") if rep % 2 == 0 else ("new", "old"):
            d = json.loads(tts(args, clis[k], KOKORO_TEXT, f"{tmp}/{k}.wav").stdout)
            times[k].append(d["inference_ms"])
            audio = d["audio_seconds"]
    same = len({hashlib.sha256(open(f"{tmp}/{k}.wav", "rb").read()).hexdigest() for k in clis}) == 1
    row = {"audio_s": audio, "same_wav_bytes": same}
    for k, cli in clis.items():
        best = min(times[k][1:])  # the first run warms the driver's caches
        r = tts(args, cli, "Hi.", f"{tmp}/hi-{k}.wav", {"GGML_SCHED_DEBUG": "2", "AUDIOCPP_LOG": "1"})
        splits = re.findall(r"## SPLIT #\d+: (\S+)", r.stderr)
        row[k] = {"ms": times[k], "best_ms": best, "rtf": best / 1000 / audio,
                  "splits": len(splits), "cpu_splits": sum(s == "CPU" for s in splits)}
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
