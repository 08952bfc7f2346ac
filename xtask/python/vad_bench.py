"""Times audiocpp_cli's Silero VAD against onnxruntime's official Silero ONNX model on the
same audio, in one run, at 1 and 2 threads; prints medians, the ratio and peak RSS.

Usage: vad_bench.py --cli PATH --model BIN --specs DIR --onnx ONNX --audio WAV [--repeat N]
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from vad_reference import CONTEXT, RATE, read_wav16k, windows  # noqa: E402


def ours(args, threads):
    cmd = [args.cli, "--task", "vad", "--family", "silero_vad", "--model", args.model, "--audio", args.audio,
           "--model-spec-override", args.specs, "--threads", str(threads), "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = (time.perf_counter() - t0) * 1000
    return json.loads(out)["inference_ms"], wall


def onnx_once(onnx, x, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    sess = ort.InferenceSession(onnx, sess_options=o, providers=["CPUExecutionProvider"])
    chunks = windows(x)
    t0 = time.perf_counter()
    state = np.zeros((2, 1, 128), np.float32)
    ctx = np.zeros((1, CONTEXT), np.float32)
    sr = np.array(RATE, np.int64)
    for chunk in chunks:
        inp = np.concatenate([ctx, chunk[None]], 1)
        _, state = sess.run(None, {"input": inp, "state": state, "sr": sr})
        ctx = inp[:, -CONTEXT:]
    return (time.perf_counter() - t0) * 1000


def peak_rss_kb(argv):
    """Peak RSS of a child process, measured by a fresh Python that only waits for it."""
    code = "import resource,subprocess,sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); " \
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    return int(subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    for a in ["--cli", "--model", "--specs", "--onnx", "--audio"]:
        ap.add_argument(a, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    x = read_wav16k(args.audio)
    secs = len(x) / RATE
    print(f"audio: {args.audio} ({secs:.1f} s, {len(windows(x))} windows of 512 samples)")
    print(f"{'threads':>7} {'audiocpp ms':>12} {'(process ms)':>13} {'onnxruntime ms':>15} {'speedup':>8} {'audiocpp RTF':>13}")
    for threads in (1, 2):
        runs = [ours(args, threads) for _ in range(args.repeat)]
        ours_ms = statistics.median(r[0] for r in runs)
        wall_ms = statistics.median(r[1] for r in runs)
        ort_ms = statistics.median(onnx_once(args.onnx, x, threads) for _ in range(args.repeat))
        print(f"{threads:>7} {ours_ms:>12.1f} {wall_ms:>13.1f} {ort_ms:>15.1f} {ort_ms / ours_ms:>7.2f}x {ours_ms / 1000 / secs:>13.5f}")
    cli = [args.cli, "--task", "vad", "--family", "silero_vad", "--model", args.model, "--audio", args.audio,
           "--model-spec-override", args.specs, "--threads", "1"]
    ort_script = ("import sys; sys.path.insert(0, %r); import vad_bench as b, vad_reference as r; "
                  "b.onnx_once(%r, r.read_wav16k(%r), 1)") % (__file__.rsplit("/", 1)[0], args.onnx, args.audio)
    ours_rss = peak_rss_kb(cli)
    ort_rss = peak_rss_kb([sys.executable, "-c", ort_script])
    print(f"peak RSS: audiocpp_cli {ours_rss / 1024:.1f} MiB, onnxruntime (python process) {ort_rss / 1024:.1f} MiB, "
          f"ratio {ort_rss / ours_rss:.2f}x")
    print("speedup = onnxruntime time / audiocpp time (model compute only; >1 means audiocpp is faster)")


if __name__ == "__main__":
    main()
