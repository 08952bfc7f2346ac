"""Reference word timestamps for the Rust tests: faster-whisper (CTranslate2 on the CPU,
float32) with `word_timestamps=True` on the same CTranslate2 model the converter reads,
greedy (beam_size=1, temperature 0), no previous-text prompt, in English: for every
clip, its segments (start, end, text, seek) and each segment's words (word, start, end,
probability), as faster-whisper computes them from the cross-attention of the model's
alignment heads (CTranslate2's `align`: dynamic time warping over the attention).

Usage: asr_word_reference.py --model DIR --out JSON CLIP.wav [CLIP.wav ...]
"""
import argparse
import json
import wave

import numpy as np
from faster_whisper import WhisperModel

RATE = 16000


def read_wav16k(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("clips", nargs="+")
    a = ap.parse_args()

    model = WhisperModel(a.model, device="cpu", compute_type="float32", cpu_threads=2)
    result = {"clips": {}}
    for clip in a.clips:
        segments, _ = model.transcribe(
            read_wav16k(clip),
            language="en",
            beam_size=1,
            best_of=1,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
            word_timestamps=True,
        )
        segments = list(segments)
        result["clips"][clip] = {
            "text": "".join(s.text for s in segments).strip(),
            "segments": [
                {
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "seek": s.seek,
                    "words": [
                        {"word": w.word, "start": w.start, "end": w.end, "probability": w.probability}
                        for w in s.words
                    ],
                }
                for s in segments
            ],
        }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
