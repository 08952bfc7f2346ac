"""Reference Whisper results for the Rust tests: faster-whisper (CTranslate2 on the CPU)
on the same CTranslate2 model the converter reads, greedy (beam_size=1, temperature 0),
each 30 s window decoded on its own (no previous-text prompt), in both decoding modes:

- `text`, `segments`: faster-whisper's default, `without_timestamps=False`: timestamp
  tokens are predicted, segments carry their start and end, and a window that ends
  inside speech is re-read from its last timestamp;
- `without_timestamps`: `without_timestamps=True`, one segment per 30 s window read back
  to back (a window whose text ends early loses the rest of its speech);
- `condition_on_previous_text`: the default mode with faster-whisper's other default,
  `condition_on_previous_text=True` (each window prompted with the text before it),
  which audiocpp does not do: recorded to say how far that is;
- `int8`: the default mode with the same weights quantized by CTranslate2
  (`compute_type="int8"`), the peer of audiocpp's q8_0 conversion.

Each segment carries the `seek` (mel frame) of the window it was decoded from.

With `--language auto`, faster-whisper detects the language (its `detect_language` on
the first 30 s window: softmax over the language tokens after `<|startoftranscript|>`)
and the detected language and probability are recorded with each clip.

Writes, for every clip, the transcripts, the segments' token ids, and the log-mel
features faster-whisper's own front end computed (raw little-endian f32, n_mels rows of
n_frames, in `<out dir>/mel/<clip>.f32`), plus the token suppression list it used.

Usage: asr_reference.py --model DIR [--language en|auto] --out JSON CLIP.wav [CLIP.wav ...]
"""
import argparse
import json
import os
import wave

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.transcribe import get_suppressed_tokens

RATE = 16000


def read_wav16k(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--language", default="en")
    ap.add_argument("clips", nargs="+")
    a = ap.parse_args()

    model = WhisperModel(a.model, device="cpu", compute_type="float32", cpu_threads=2)
    model_int8 = WhisperModel(a.model, device="cpu", compute_type="int8", cpu_threads=2)
    mel_dir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "mel")
    os.makedirs(mel_dir, exist_ok=True)
    result = {"clips": {}}
    language = None if a.language == "auto" else a.language
    for clip in a.clips:
        audio = read_wav16k(clip)

        def transcribe(language, without_timestamps, condition_on_previous_text=False, model=model):
            segments, info = model.transcribe(
                audio,
                language=language,
                beam_size=1,
                best_of=1,
                temperature=0.0,
                without_timestamps=without_timestamps,
                condition_on_previous_text=condition_on_previous_text,
                vad_filter=False,
            )
            segments = list(segments)
            return {
                "text": "".join(s.text for s in segments).strip(),
                "segments": [
                    {"start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
                     "seek": s.seek}
                    for s in segments
                ],
            }, info

        default, info = transcribe(language, without_timestamps=False)
        features = model.feature_extractor(audio)[:, :-1].astype(np.float32)
        name = os.path.splitext(os.path.basename(clip))[0]
        mel_path = os.path.join(mel_dir, name + ".f32")
        np.ascontiguousarray(features).tofile(mel_path)
        result["clips"][clip] = {
            **default,
            "without_timestamps": transcribe(info.language, without_timestamps=True)[0],
            "condition_on_previous_text": transcribe(
                info.language, without_timestamps=False, condition_on_previous_text=True
            )[0],
            "int8": transcribe(info.language, without_timestamps=False, model=model_int8)[0],
            "mel": mel_path,
            "mel_shape": list(features.shape),
            "language": info.language,
            "language_probability": info.language_probability,
        }
    tok = model.hf_tokenizer
    from faster_whisper.tokenizer import Tokenizer

    t = Tokenizer(tok, model.model.is_multilingual, task="transcribe", language="en")
    result["suppress_tokens"] = list(get_suppressed_tokens(t, [-1]))
    result["sot_sequence"] = list(t.sot_sequence)
    result["no_timestamps"] = t.no_timestamps
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
