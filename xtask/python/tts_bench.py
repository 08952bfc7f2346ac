"""Times audiocpp_cli's Kokoro-82M against onnxruntime on the same phonemes and voice, in
one run: our GGUF in f32 and f16 against the int8 ONNX export and the dequantized f32
graph (tts_reference.py makes it), at 1 and 2 threads, each configuration's runs
alternated with the others. Prints the median real-time factor (synthesis time / audio
duration; model loading excluded on both sides) and the peak RSS of each configuration,
with ratios against onnxruntime int8 at the same thread count.

Usage: tts_bench.py --cli PATH --gguf-f32 GGUF --gguf-f16 GGUF --onnx-int8 ONNX
                    --onnx-f32 ONNX --voices DIR --vocab JSON [--repeat N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

RATE = 24000
VOICE = "af_heart"
# About 13 s of speech at speed 1: misaki US lexicon phonemes of
# "Speech recognition in Rust is working today. The quick brown fox jumps over the lazy
# dog, and then it runs back home. This sentence tests a longer text with several words."
PHONEMES = (
    "spˈiʧ ɹˌɛkəɡnˈɪʃən ɪn ɹˈʌst ɪz wˈɜɹkɪŋ tədˈA. "
    "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɔɡ, ænd ðˈɛn ɪt ɹˈʌnz bˈæk hˈOm. "
    "ðɪs sˈɛntᵊns tˈɛsts ə lˈɔŋɡəɹ tˈɛkst wɪð sˈɛvəɹəl wˈɜɹdz."
)


def ours_cmd(args, gguf, threads, out):
    return [args.cli, "--task", "tts", "--family", "kokoro", "--model", gguf,
            "--phonemes", PHONEMES, "--voice", VOICE, "--speed", "1", "--threads", str(threads),
            "--out", out, "--json"]


def ort_cmd(args, onnx, threads):
    return [sys.executable, __file__, "--ort-child", "--onnx", onnx, "--voices", args.voices,
            "--vocab", args.vocab, "--threads", str(threads)]


def ort_child(args):
    """One onnxruntime synthesis in this process; prints JSON like the CLI's."""
    import onnxruntime as ort
    with open(args.vocab, encoding="utf-8") as f:
        vocab = json.load(f)["vocab"]
    ids = [vocab[c] for c in PHONEMES]
    pack = np.fromfile(os.path.join(args.voices, f"{VOICE}.bin"), dtype="<f4").reshape(510, 256)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(args.onnx, opts, providers=["CPUExecutionProvider"])
    feed = {
        "tokens": np.array([[0] + ids + [0]], dtype=np.int64),
        "style": pack[len(ids) - 1].reshape(1, 256),
        "speed": np.array([1.0], dtype=np.float32),
    }
    t = time.perf_counter()
    audio = sess.run(None, feed)[0]
    ms = (time.perf_counter() - t) * 1000
    print(json.dumps({"inference_ms": ms, "audio_seconds": audio.size / RATE}))


def rss_mib(cmd):
    """Runs cmd once; returns (its JSON output, its own peak RSS in MiB, from wait4)."""
    import tempfile
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.read().decode(errors='replace')[-2000:]}")
    return json.loads(out), usage.ru_maxrss / 1024


def rtf(result):
    if "inference_ms" in result and "audio_seconds" in result:
        return result["inference_ms"] / 1000 / result["audio_seconds"]
    if "rtf" in result:
        return float(result["rtf"])
    raise SystemExit(f"no timing in the output: {result}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ort-child", action="store_true")
    ap.add_argument("--cli")
    ap.add_argument("--gguf-f32")
    ap.add_argument("--gguf-f16")
    ap.add_argument("--gguf-q8_0")
    ap.add_argument("--onnx-int8")
    ap.add_argument("--onnx-f32")
    ap.add_argument("--onnx")
    ap.add_argument("--voices", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if args.ort_child:
        return ort_child(args)

    out_wav = os.path.join(os.path.dirname(os.path.abspath(args.gguf_f32)), "bench-tts.wav")
    print(f"phonemes: {len(PHONEMES)} tokens, voice {VOICE}, speed 1, {args.repeat} runs each (median)")
    print(f"{'config':34} {'threads':>7} {'RTF':>8} {'x vs ORT int8':>14} {'peak RSS MiB':>13}")
    for threads in (1, 2):
        configs = [
            ("onnxruntime int8 (export)", ort_cmd(args, args.onnx_int8, threads)),
            ("onnxruntime f32 (dequantized)", ort_cmd(args, args.onnx_f32, threads)),
            ("audiocpp f32 GGUF", ours_cmd(args, args.gguf_f32, threads, out_wav)),
            ("audiocpp f16 GGUF", ours_cmd(args, args.gguf_f16, threads, out_wav)),
        ]
        if args.gguf_q8_0:
            configs.append(("audiocpp q8_0 GGUF", ours_cmd(args, args.gguf_q8_0, threads, out_wav)))
        times = {name: [] for name, _ in configs}
        rss = {}
        for _ in range(args.repeat):
            for name, cmd in configs:
                result, peak = rss_mib(cmd)
                times[name].append(rtf(result))
                rss[name] = max(rss.get(name, 0), peak)
        base = statistics.median(times[configs[0][0]])
        for name, _ in configs:
            med = statistics.median(times[name])
            print(f"{name:34} {threads:>7} {med:>8.3f} {base / med:>13.2f}x {rss[name]:>13.0f}")


if __name__ == "__main__":
    main()
