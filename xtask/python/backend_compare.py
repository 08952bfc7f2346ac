"""Two runs of gpu_bench.py on the same machine, one GPU backend each (`--gpu cuda`,
`--gpu vulkan`), side by side: Whisper time per run and per decoder step as the ratio of
the second backend to the first, and whether their transcripts agree; Silero and Kokoro
likewise. Prints a markdown table.

Usage: backend_compare.py FIRST.json SECOND.json [--names cuda,vulkan]
"""
import argparse
import json


def word_edits(a, b):
    """Word-level edit distance (substitutions, insertions, deletions)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("--names", default="cuda,vulkan")
    args = ap.parse_args()
    a_name, b_name = args.names.split(",")
    with open(args.first) as f:
        a = json.load(f)
    with open(args.second) as f:
        b = json.load(f)
    key = lambda r: (r["model"], r["weights"], r["clip"])
    rows_b = {key(r): r for r in b.get("whisper", [])}
    print(f"| model | weights | clip | {a_name} ms | {b_name} ms | {b_name}/{a_name} | "
          f"{a_name} step ms | {b_name} step ms | same transcript |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for ra in a.get("whisper", []):
        rb = rows_b.get(key(ra))
        if rb is None:
            continue
        same = ra["text"] == rb["text"]
        if not same:
            wa, wb = ra["text"].split(), rb["text"].split()
            same = f"no: {word_edits(wa, wb)} word edits in {len(wa)} words"
        print(f"| {ra['model']} | {ra['weights']} | {ra['clip']} | {ra['cuda_ms']:.0f} | "
              f"{rb['cuda_ms']:.0f} | {rb['cuda_ms'] / ra['cuda_ms']:.2f} | "
              f"{ra['cuda_step_ms']:.3f} | {rb['cuda_step_ms']:.3f} | {same} |")
    va, vb = a.get("vad"), b.get("vad")
    if va and vb:
        ga, gb = va[f"vad_cuda_ms"], vb["vad_cuda_ms"]
        print(f"| Silero VAD | | 600s | {ga:.0f} | {gb:.0f} | {gb / ga:.2f} | | | "
              f"segments same as the CPU's: {va['segments_identical']}, {vb['segments_identical']} |")
    ka, kb = a.get("kokoro"), b.get("kokoro")
    if ka and kb:
        print(f"| Kokoro | | ~65 s text | RTF {ka['cuda_rtf']:.4f} | RTF {kb['cuda_rtf']:.4f} | "
              f"{kb['cuda_rtf'] / ka['cuda_rtf']:.2f} | | | samples {ka['cuda_samples']} vs "
              f"{kb['cuda_samples']} (CPU {ka['cpu_samples']}) |")


if __name__ == "__main__":
    main()
