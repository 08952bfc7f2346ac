"""Issue 40's GPU measurements, run on a machine with an NVIDIA GPU: one package's CLI
with ggml-cuda beside it (docs/build/CUDA.md) against the same CLI on the CPU, and
against Hugging Face transformers' Whisper in PyTorch (whisper_hf_peer.py, weights
converted from the same CTranslate2 folders). Needs numpy; the peer needs torch and
transformers. Prints a markdown table per part and writes every run to OUT/gpu_bench.json.

- Whisper tiny.en and base, GGUF f16 and q8_0 (converted here by the CLI), on a 60.8 s
  espeak-ng clip and a 10 min clip (six times the pocketsphinx human speech followed by
  that clip): CUDA (best of two) against the CPU at --cpu-threads; transcripts compared;
  decoder steps and the time per step (the CLI's decoder_step_ms).
- Silero VAD on the 10 min clip, CPU against CUDA; Whisper with --vad-model on CUDA, the
  VAD on its default backend (the CPU) against --vad-backend cuda.
- Batches (`--batch`): Whisper with --vad-model on the 10 min clip, its chunks decoded
  one after another (--batch 1) against 4, 8 and 16 at a time, on the GPU and on the
  CPU at --cpu-threads, runs alternated; the transcripts must be identical.
- Kokoro (a GGUF given) on a ~60 s text (af_heart): RTF on CUDA and the CPU, and the CUDA audio
  against the CPU's as log-mel MAE and cosine (the f16 bounds of
  engine/tests/kokoro_reference.rs: MAE <= 0.06, cosine >= 0.9995).

Usage: gpu_bench.py --cli PATH --tiny CT2DIR --base CT2DIR --speech WAV --espeak WAV
                    --vad BIN [--kokoro GGUF] [--peer] [--cpu-threads 16] --out DIR
                    [--baseline-cli PATH] [--only tiny.en:f16,base:q8_0] [--parts whisper]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import wave

import numpy as np

from backend_compare import word_edits

HERE = os.path.dirname(os.path.abspath(__file__))
KOKORO_TEXT = (
    "The lighthouse keeper climbed the narrow stairs every evening at dusk. "
    "He polished the great lens, trimmed the wick, and watched the ships pass far below. "
    "On calm nights the sea was silver and quiet, and he could hear the gulls settling on "
    "the rocks. On stormy nights the wind howled against the glass, the waves broke over "
    "the harbour wall, and the beam swept through the rain like a slow white arm. "
    "Sailors told stories about him in every port along the coast. Some said he never "
    "slept. Others said he knew the name of every ship that had ever passed. When he "
    "finally retired, after forty years, the town gave him a small brass clock, and he "
    "kept it on the shelf beside his window, where he could still see the light. "
    "Years later, his granddaughter found a notebook in a drawer beneath that clock. It "
    "was full of small drawings of ships, each with a date and a few words about the "
    "weather, the colour of the sky, and the sound of the bell on the harbour buoy. She "
    "read it slowly, page by page, and for the first time she understood why he had "
    "never wanted to leave the tower."
)


def run(cmd, env=None):
    """Runs one CLI command; returns its JSON output (raises with stderr on failure)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout)


def read_wav(path):
    with wave.open(path) as w:
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)


def write_wav(path, rate, samples):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype(np.int16).tobytes())


def make_clips(args):
    """The 60 s clip (espeak-ng) and the 10 min one (human speech and espeak-ng, six times)."""
    rate, speech = read_wav(args.speech)
    rate2, espeak = read_wav(args.espeak)
    assert rate == rate2 == 16000
    long = os.path.join(args.out, "clip600.wav")
    write_wav(long, rate, np.concatenate([speech, espeak] * 6))
    return {"60s": args.espeak, "600s": long}


def log_mel(x, rate=24000.0, n_fft=1024, hop=256, bands=80):
    """engine/tests/kokoro_reference.rs's log_mel: HTK triangles on the magnitude."""
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    edges = hz(mel(rate / 2) * np.arange(bands + 2) / (bands + 1))
    freqs = np.arange(n_fft // 2 + 1) * rate / n_fft
    fb = np.zeros((bands, freqs.size))
    for b in range(bands):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        up = (freqs > lo) & (freqs <= mid)
        down = (freqs > mid) & (freqs < hi)
        fb[b, up] = (freqs[up] - lo) / (mid - lo)
        fb[b, down] = (hi - freqs[down]) / (hi - mid)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = [x[s:s + n_fft] * window for s in range(0, len(x) - n_fft + 1, hop)]
    spec = np.abs(np.fft.rfft(np.array(frames), axis=1))
    return np.log(np.maximum(spec @ fb.T, 1e-5)).ravel()


def whisper_part(args, clips, results):
    cli = args.cli
    rows = []
    for name, ct2 in (("tiny.en", args.tiny), ("base", args.base)):
        for quant in ("f16", "q8_0"):
            if args.only and f"{name}:{quant}" not in args.only.split(","):
                continue
            gguf = os.path.join(args.out, f"{name}-{quant}.gguf")
            if not os.path.exists(gguf):
                run([cli, "--task", "convert", "--family", "whisper", "--model", ct2, "--out", gguf,
                     *(["--quantize", quant] if quant != "f16" else []), "--json"])
            for clip, path in clips.items():
                flags = ["--task", "asr", "--family", "whisper", "--model", gguf, "--audio", path,
                         "--language", "en", "--temperatures", "0", "--json"]
                base = [cli] + flags
                # the baseline CLI's runs alternate with these, on the same libraries
                cuda, old_cuda = [], []
                for _ in range(2):
                    cuda.append(run(base + ["--backend", args.gpu]))
                    if args.baseline_cli:
                        old_cuda.append(run([args.baseline_cli] + flags + ["--backend", args.gpu]))
                best = min(cuda, key=lambda d: d["inference_ms"])
                cpu = run(base + ["--backend", "cpu", "--threads", str(args.cpu_threads)])
                row = {
                    "model": name, "weights": quant, "clip": clip, "audio_s": best["audio_seconds"],
                    "cuda_ms": best["inference_ms"], "cuda_runs_ms": [d["inference_ms"] for d in cuda],
                    "cpu_ms": cpu["inference_ms"],
                    "cuda_steps": best["decoder_steps"],
                    "cuda_step_ms": best["decoder_ms"] / max(best["decoder_steps"], 1),
                    "cpu_step_ms": cpu["decoder_ms"] / max(cpu["decoder_steps"], 1),
                    "same_text": best["text"] == cpu["text"], "text": best["text"],
                    "cuda_device": best["device"],
                }
                if not row["same_text"]:
                    row["cpu_text"] = cpu["text"]
                if old_cuda:
                    old = min(old_cuda, key=lambda d: d["inference_ms"])
                    row.update(baseline_cuda_ms=old["inference_ms"],
                               baseline_cuda_runs_ms=[d["inference_ms"] for d in old_cuda],
                               baseline_cuda_step_ms=old["decoder_ms"] / max(old["decoder_steps"], 1),
                               baseline_same_text=old["text"] == best["text"],
                               baseline_same_segments=all(
                                   d.get("segments") == best.get("segments") for d in old_cuda + cuda))
                    print(f"  baseline cuda {row['baseline_cuda_ms']:.0f} ms (step "
                          f"{row['baseline_cuda_step_ms']:.3f} ms), same text as ours "
                          f"{row['baseline_same_text']}, every run's segments alike "
                          f"{row['baseline_same_segments']}", flush=True)
                rows.append(row)
                print(f"{name} {quant} {clip}: cuda {row['cuda_ms']:.0f} ms "
                      f"(step {row['cuda_step_ms']:.3f} ms x {row['cuda_steps']}), cpu "
                      f"{row['cpu_ms']:.0f} ms (step {row['cpu_step_ms']:.3f} ms), "
                      f"same text {row['same_text']}", flush=True)
    results["whisper"] = rows
    print("\n| model | weights | clip | CUDA ms | CPU ms | CPU/CUDA | CUDA step ms | CPU step ms | same text |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['model']} | {r['weights']} | {r['clip']} | {r['cuda_ms']:.0f} | {r['cpu_ms']:.0f} | "
              f"{r['cpu_ms'] / r['cuda_ms']:.1f}x | {r['cuda_step_ms']:.3f} | {r['cpu_step_ms']:.3f} | "
              f"{r['same_text']} |")
    if args.baseline_cli:
        print("\n| model | weights | clip | CUDA ms baseline | CUDA ms | step ms baseline | step ms | same text |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
        for r in rows:
            print(f"| {r['model']} | {r['weights']} | {r['clip']} | {r['baseline_cuda_ms']:.0f} | "
                  f"{r['cuda_ms']:.0f} | {r['baseline_cuda_step_ms']:.3f} | {r['cuda_step_ms']:.3f} | "
                  f"{r['baseline_same_text']} |")


def vad_part(args, clips, results):
    cli = args.cli
    vad = [cli, "--task", "vad", "--family", "silero_vad", "--model", args.vad, "--audio",
           clips["600s"], "--json"]
    out = {}
    for backend in ("cpu", args.gpu):
        runs = [run(vad + ["--backend", backend, "--threads", str(args.cpu_threads)]) for _ in range(2)]
        out[backend] = min(d["inference_ms"] for d in runs)
        out[backend + "_segments"] = runs[0]["segments"]
    same = out["cpu_segments"] == out[args.gpu + "_segments"]
    print(f"\nSilero VAD, 10 min: cpu {out['cpu']:.0f} ms, {args.gpu} {out[args.gpu]:.0f} ms, "
          f"segments identical {same} ({len(out['cpu_segments'])})")
    gguf = os.path.join(args.out, "base-q8_0.gguf")
    asr = [cli, "--task", "asr", "--family", "whisper", "--model", gguf, "--audio", clips["600s"],
           "--language", "en", "--temperatures", "0", "--backend", args.gpu, "--vad-model", args.vad,
           "--threads", str(args.cpu_threads), "--json"]
    default = min((run(asr) for _ in range(2)), key=lambda d: d["inference_ms"])
    on_gpu = min((run(asr + ["--vad-backend", args.gpu]) for _ in range(2)),
                 key=lambda d: d["inference_ms"])
    print(f"base q8_0 + VAD on CUDA, 10 min: VAD on {default['vad_device']} "
          f"{default['inference_ms']:.0f} ms, VAD on {on_gpu['vad_device']} "
          f"{on_gpu['inference_ms']:.0f} ms, same text {default['text'] == on_gpu['text']}")
    results["vad"] = {
        "vad_cpu_ms": out["cpu"], "vad_cuda_ms": out[args.gpu], "segments_identical": same,
        "asr_vad_default_ms": default["inference_ms"], "asr_vad_default_device": default["vad_device"],
        "asr_vad_cuda_ms": on_gpu["inference_ms"], "asr_vad_cuda_device": on_gpu["vad_device"],
    }


def batch_part(args, clips, results):
    cli = args.cli
    rows = []
    for name in ("tiny.en", "base"):
        for quant in ("f16", "q8_0"):
            if args.only and f"{name}:{quant}" not in args.only.split(","):
                continue
            gguf = os.path.join(args.out, f"{name}-{quant}.gguf")
            if not os.path.exists(gguf):
                ct2 = args.tiny if name == "tiny.en" else args.base
                run([cli, "--task", "convert", "--family", "whisper", "--model", ct2, "--out", gguf,
                     *(["--quantize", quant] if quant != "f16" else []), "--json"])
            for backend in (args.gpu, "cpu"):
                asr = [cli, "--task", "asr", "--family", "whisper", "--model", gguf, "--audio",
                       clips["600s"], "--language", "en", "--temperatures", "0", "--backend",
                       backend, "--vad-model", args.vad, "--threads", str(args.cpu_threads),
                       "--json"]
                sizes = (1, 4, 8, 16) if backend != "cpu" else (1, 8)
                runs = {b: [] for b in sizes}
                # the baseline CLI's runs alternate with these on the GPU
                old = args.baseline_cli if backend != "cpu" else None
                old_runs = {b: [] for b in sizes}
                for _ in range(2 if backend != "cpu" else 1):
                    for b in sizes:
                        runs[b].append(run(asr + ["--batch", str(b)]))
                        if old:
                            old_runs[b].append(run([old] + asr[1:] + ["--batch", str(b)]))
                texts = {d["text"] for rs in runs.values() for d in rs}
                # how far each size's text is from one after another's, in words
                alone = runs[1][0]["text"].split()
                wer = {b: word_edits(rs[0]["text"].split(), alone) / max(len(alone), 1)
                       for b, rs in runs.items()}
                row = {"model": name, "weights": quant, "backend": backend,
                       "same_text": len(texts) == 1, "wer_vs_batch1": wer,
                       "steps": runs[1][0]["decoder_steps"], "chunks": runs[1][0]["decode_passes"]}
                for b, rs in runs.items():
                    row[f"batch{b}_ms"] = min(d["inference_ms"] for d in rs)
                    row[f"batch{b}_runs_ms"] = [d["inference_ms"] for d in rs]
                    if old:
                        row[f"baseline_batch{b}_runs_ms"] = [d["inference_ms"] for d in old_runs[b]]
                        row[f"baseline_batch{b}_same_text"] = all(
                            d["text"] == rs[0]["text"] for d in old_runs[b])
                rows.append(row)
                print(f"batch {name} {quant} {backend}: " + ", ".join(
                    f"{b}: {row[f'batch{b}_ms']:.0f} ms" for b in sizes) +
                    f", same text {row['same_text']}, WER against batch 1 " +
                    ", ".join(f"{b}: {w:.4f}" for b, w in wer.items()), flush=True)
                if old:
                    print(f"  baseline {name} {quant} {backend}: " + ", ".join(
                        f"{b}: {row[f'baseline_batch{b}_runs_ms']} ms, same text "
                        f"{row[f'baseline_batch{b}_same_text']}" for b in sizes), flush=True)
    results["batch"] = rows
    print("\n| model | weights | backend | batch 1 ms | 4 | 8 | 16 | batch 8 vs 1 | same text |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        cell = lambda b: f"{r[f'batch{b}_ms']:.0f}" if f"batch{b}_ms" in r else "-"
        print(f"| {r['model']} | {r['weights']} | {r['backend']} | {cell(1)} | {cell(4)} | {cell(8)} | "
              f"{cell(16)} | {r['batch1_ms'] / r['batch8_ms']:.2f}x | {r['same_text']} |")


def kokoro_part(args, results):
    cli = args.cli
    outs = {}
    for backend, reps in ((args.gpu, 2), ("cpu", 1)):
        wav = os.path.join(args.out, f"kokoro-{backend}.wav")
        runs = [run([cli, "--task", "tts", "--family", "kokoro", "--model", args.kokoro, "--text",
                     KOKORO_TEXT, "--voice", "af_heart", "--backend", backend, "--threads",
                     str(args.cpu_threads), "--out", wav, "--json"]) for _ in range(reps)]
        best = min(runs, key=lambda d: d["inference_ms"])
        outs[backend] = (best, read_wav(wav)[1].astype(np.float64) / 32768.0)
    (c, a), (p, b) = outs[args.gpu], outs["cpu"]
    row = {"audio_s": c["audio_seconds"], "cuda_rtf": c["rtf"], "cpu_rtf": p["rtf"],
           "cuda_samples": len(a), "cpu_samples": len(b)}
    if len(a) == len(b):
        x, y = log_mel(b), log_mel(a)
        row["log_mel_mae"] = float(np.mean(np.abs(x - y)))
        row["log_mel_cos"] = float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))
        row["within_f16_bounds"] = row["log_mel_mae"] <= 0.06 and row["log_mel_cos"] >= 0.9995
    print(f"\nKokoro {os.path.basename(args.kokoro)}: {row}")
    results["kokoro"] = row


def peer_part(args, clips, results):
    rows = []
    for name, ct2 in (("tiny.en", args.tiny), ("base", args.base)):
        ours = {r["clip"]: r for r in results.get("whisper", [])
                if r["model"] == name and r["weights"] == "f16"}
        for clip, path in clips.items():
            cmd = [sys.executable, os.path.join(HERE, "whisper_hf_peer.py"), "--ct2", ct2, "--audio", path,
                   "--device", "cuda", "--dtype", "float16", "--repeats", "2", "--json"]
            if clip in ours:
                ref = os.path.join(args.out, f"ours-{name}-{clip}.txt")
                with open(ref, "w") as f:
                    f.write(ours[clip]["text"])
                cmd += ["--compare-text", ref]
            p = subprocess.run(cmd, capture_output=True, text=True)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if p.returncode != 0 or not lines:
                print(f"peer {name} {clip}: failed: {p.stderr.strip()[-800:]}")
                continue
            d = json.loads(lines[-1])
            d.update(model=name, clip=clip)
            rows.append(d)
            mine = ours.get(clip, {}).get("cuda_ms")
            print(f"peer {name} {clip}: {d['median_s'] * 1000:.0f} ms, ours (f16 CUDA) {mine} ms; "
                  f"WER against ours {d.get('wer_vs_compare')}", flush=True)
    results["peer"] = rows


def main():
    ap = argparse.ArgumentParser()
    for a in ("--cli", "--tiny", "--base", "--speech", "--espeak", "--vad", "--out"):
        ap.add_argument(a, required=True)
    ap.add_argument("--kokoro")
    ap.add_argument("--peer", action="store_true")
    ap.add_argument("--cpu-threads", type=int, default=16)
    ap.add_argument("--parts", default="whisper,vad,batch,kokoro,peer")
    ap.add_argument("--gpu", default="cuda", help="the GPU backend (cpu: a dry run of the script)")
    ap.add_argument("--baseline-cli", help="another build's CLI beside the same libraries, timed "
                    "alternately with --cli on the GPU (a before/after of a change)")
    ap.add_argument("--only", help="the Whisper runs to make, as model:weights pairs "
                    "(tiny.en:f16,base:q8_0); all four when not given")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    clips = make_clips(args)
    results = {"date": time.strftime("%Y-%m-%d")}
    saved = os.path.join(args.out, "gpu_bench.json")
    if os.path.exists(saved):  # an earlier call's parts (the peer compares with them)
        with open(saved) as f:
            results.update(json.load(f))
    parts = args.parts.split(",")
    steps = [("whisper", lambda: whisper_part(args, clips, results)),
             ("vad", lambda: vad_part(args, clips, results)),
             ("batch", lambda: batch_part(args, clips, results)),
             ("kokoro", lambda: kokoro_part(args, results) if args.kokoro else None),
             ("peer", lambda: peer_part(args, clips, results) if args.peer else None)]
    for name, step in steps:
        if name in parts:
            try:
                step()
            except Exception as e:  # one part failing must not lose the others' numbers
                print(f"{name}: failed: {e}", flush=True)
                results[name + "_error"] = str(e)
            with open(saved, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
