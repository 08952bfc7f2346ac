"""Times audiocpp_cli's Whisper against faster-whisper (CTranslate2) on the same audio and
the same CTranslate2 model, in one run: our GGUF in f16 and q8_0 against faster-whisper's
float32 and int8, at 1 and 2 threads, each pair's runs alternated. Prints the median
real-time factor (model compute time / audio duration) and peak RSS of each
configuration, with ratios. Both decode the
same way: greedy, with timestamp tokens (both programs' default: every window is read,
the next one starting at the last timestamp), no previous-text prompt. With
`--without-timestamps` both suppress timestamp tokens instead (faster-whisper's
`without_timestamps=True`, audiocpp's `--without-timestamps`: 30 s windows read back to
back), the mode the bench measured before both defaults were timestamped.

Usage: asr_bench.py --cli PATH --ct2 DIR --f16 GGUF --q8 GGUF --audio WAV [--repeat N]
                    [--without-timestamps]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
import wave

import numpy as np

RATE = 16000


def read_wav16k(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def ours_cmd(args, gguf, threads):
    return [args.cli, "--task", "asr", "--family", "whisper", "--model", gguf, "--audio", args.audio,
            "--threads", str(threads), "--temperatures", "0", "--language", "en", "--json",
            *(["--without-timestamps"] if args.without_timestamps else [])]


def fw_cmd(args, compute_type, threads):
    return [sys.executable, __file__, "--fw-child", "--ct2", args.ct2, "--audio", args.audio,
            "--compute-type", compute_type, "--threads", str(threads),
            *(["--without-timestamps"] if args.without_timestamps else [])]


def fw_child(args):
    """One faster-whisper transcription in this process; prints JSON like the CLI's."""
    from faster_whisper import WhisperModel
    model = WhisperModel(args.ct2, device="cpu", compute_type=args.compute_type, cpu_threads=args.threads)
    audio = read_wav16k(args.audio)
    t0 = time.perf_counter()
    segments, _ = model.transcribe(audio, language="en", beam_size=1, best_of=1, temperature=0.0,
                                   without_timestamps=args.without_timestamps, condition_on_previous_text=False,
                                   vad_filter=False)
    text = "".join(s.text for s in segments).strip()
    ms = (time.perf_counter() - t0) * 1000
    print(json.dumps({"inference_ms": ms, "audio_seconds": len(audio) / RATE, "text": text}))


def measure(argv):
    """Runs one process and returns its JSON result; a failure stops the bench loudly."""
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmark run failed ({' '.join(argv)}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def rtf(argv):
    """One run's real-time factor and transcript."""
    result = measure(argv)
    return result["inference_ms"] / 1000 / result["audio_seconds"], result["text"]


def peak_rss_mib(argv):
    """Peak RSS (MiB) of one run of `argv`."""
    code = ("import resource,subprocess,sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    rss_kb = int(subprocess.run([sys.executable, "-c", code, *argv], check=True, capture_output=True,
                                text=True).stdout)
    return rss_kb / 1024


def run_pair(ours, theirs, repeat):
    """Median RTF, peak RSS and transcript of both commands, their runs alternated so
    that a change in the machine's load touches both alike."""
    rtfs, texts = ([], []), ["", ""]
    for _ in range(repeat):
        for i, argv in enumerate((ours, theirs)):
            r, texts[i] = rtf(argv)
            rtfs[i].append(r)
    return [(statistics.median(rtfs[i]), peak_rss_mib(argv), texts[i]) for i, argv in enumerate((ours, theirs))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fw-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compute-type", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    for a in ["--cli", "--f16", "--q8"]:
        ap.add_argument(a)
    for a in ["--ct2", "--audio"]:
        ap.add_argument(a, required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--without-timestamps", action="store_true",
                    help="both sides suppress timestamp tokens (the mode measured before)")
    args = ap.parse_args()
    if args.fw_child:
        return fw_child(args)
    secs = len(read_wav16k(args.audio)) / RATE
    mode = "without timestamp tokens" if args.without_timestamps else "with timestamp tokens (both defaults)"
    print(f"audio: {args.audio} ({secs:.1f} s); greedy, {mode}; median of {args.repeat} alternated runs; "
          f"RTF = compute time / audio time (model load excluded); RSS = peak of the whole process")
    print(f"{'threads':>7}  {'audiocpp':<9} {'RTF':>7} {'RSS MiB':>8}   {'faster-whisper':<14} {'RTF':>7} {'RSS MiB':>8}"
          f"   {'speedup':>7} {'RSS ratio':>9}")
    pairs = [("f16", args.f16, "float32"), ("q8_0", args.q8, "int8")]
    texts = {}
    for threads in (1, 2):
        for ours_name, gguf, fw_type in pairs:
            (o_rtf, o_rss, o_text), (f_rtf, f_rss, f_text) = run_pair(
                ours_cmd(args, gguf, threads), fw_cmd(args, fw_type, threads), args.repeat)
            texts[ours_name], texts[fw_type] = o_text, f_text
            print(f"{threads:>7}  {ours_name:<9} {o_rtf:>7.4f} {o_rss:>8.1f}   {fw_type:<14} {f_rtf:>7.4f} {f_rss:>8.1f}"
                  f"   {f_rtf / o_rtf:>6.2f}x {f_rss / o_rss:>8.2f}x")
    print("speedup = faster-whisper RTF / audiocpp RTF (>1: audiocpp faster); "
          "RSS ratio = faster-whisper RSS / audiocpp RSS (>1: audiocpp smaller)")
    for name, text in texts.items():
        print(f"text {name}: {text[:100]}{'...' if len(text) > 100 else ''}")


if __name__ == "__main__":
    main()
