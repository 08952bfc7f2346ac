"""Reference Silero VAD results for the Rust tests: onnxruntime on the official ONNX
export, and a plain numpy implementation fed the ggml file's own (f16-rounded) weights.

Both follow the official streaming semantics: 512-sample windows at 16 kHz, the last one
zero-padded, each preceded by the previous 64 samples (zeros first), reflect-padded 64
samples on the right. Segments use Silero's get_speech_timestamps rules with defaults.

Usage: vad_reference.py --ggml BIN --onnx ONNX --out JSON CLIP.wav [CLIP.wav ...]
"""
import argparse
import json
import struct
import wave

import numpy as np
import onnxruntime as ort

WINDOW, CONTEXT, RATE = 512, 64, 16000


def read_wav16k(path):
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def windows(x):
    n = -(-len(x) // WINDOW)
    x = np.pad(x, (0, n * WINDOW - len(x)))
    return x.reshape(n, WINDOW)


def load_ggml(path):
    """whisper.cpp's legacy container: header, then (n_dims, name_len, type, dims, name, data)*."""
    b = open(path, "rb").read()
    assert b[:4] == b"lmgg"
    (tl,) = struct.unpack_from("<i", b, 4)
    off = 8 + tl + 4 * 5  # model type, version (3), window, context
    (n_layers,) = struct.unpack_from("<i", b, off)
    off += 4 + 12 * n_layers + 16  # per layer (in, out, kernel); lstm (2); final conv (2)
    tensors = {}
    while off < len(b):
        nd, nl, ty = struct.unpack_from("<3i", b, off)
        off += 12
        ne = list(struct.unpack_from(f"<{nd}i", b, off))
        off += 4 * nd
        name = b[off:off + nl].decode()
        off += nl
        dt = np.float32 if ty == 0 else np.float16
        n = int(np.prod(ne)) if nd else 1
        a = np.frombuffer(b, dt, n, off).astype(np.float32)
        off += n * np.dtype(dt).itemsize
        tensors[name] = a.reshape(ne[::-1]) if nd else a
    return tensors


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


class NumpySilero:
    def __init__(self, w):
        self.w = w
        self.h = np.zeros(128, np.float32)
        self.c = np.zeros(128, np.float32)
        self.ctx = np.zeros(CONTEXT, np.float32)

    @staticmethod
    def conv(x, w, b, stride, pad):
        x = np.pad(x, ((0, 0), (pad, pad)))
        oc, ic, k = w.shape
        length = (x.shape[1] - k) // stride + 1
        cols = np.stack([x[:, t * stride:t * stride + k].reshape(-1) for t in range(length)], 1)
        y = w.reshape(oc, ic * k) @ cols
        return y if b is None else y + b[:, None]

    def __call__(self, chunk):
        w = self.w
        x = np.pad(np.concatenate([self.ctx, chunk]), (0, CONTEXT), mode="reflect")
        self.ctx = chunk[-CONTEXT:].copy()
        st = self.conv(x[None, :], w["_model.stft.forward_basis_buffer"], None, 128, 0)
        y = np.sqrt(st[:129] ** 2 + st[129:] ** 2)
        for i, stride in enumerate([1, 2, 2, 1]):
            y = np.maximum(self.conv(y, w[f"_model.encoder.{i}.reparam_conv.weight"],
                                     w[f"_model.encoder.{i}.reparam_conv.bias"], stride, 1), 0)
        g = (w["_model.decoder.rnn.weight_ih"] @ y[:, 0] + w["_model.decoder.rnn.bias_ih"]
             + w["_model.decoder.rnn.weight_hh"] @ self.h + w["_model.decoder.rnn.bias_hh"])
        i, f, gg, o = sigmoid(g[:128]), sigmoid(g[128:256]), np.tanh(g[256:384]), sigmoid(g[384:])
        self.c = f * self.c + i * gg
        self.h = o * np.tanh(self.c)
        z = np.dot(np.maximum(self.h, 0), w["_model.decoder.decoder.2.weight"]) + w["_model.decoder.decoder.2.bias"][0]
        return float(sigmoid(z))


def onnx_probs(path, x, threads=1):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, sess_options=o, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    ctx = np.zeros((1, CONTEXT), np.float32)
    sr = np.array(RATE, np.int64)
    out = []
    for chunk in windows(x):
        inp = np.concatenate([ctx, chunk[None]], 1)
        p, state = sess.run(None, {"input": inp, "state": state, "sr": sr})
        ctx = inp[:, -CONTEXT:]
        out.append(float(p[0, 0]))
    return out


def speech_segments(probs, n_samples, threshold=0.5, min_speech_ms=250, min_silence_ms=100, pad_ms=30):
    """Silero's get_speech_timestamps rules (no max duration), in samples."""
    neg = max(threshold - 0.15, 0.01)
    min_speech = RATE * min_speech_ms // 1000
    min_silence = RATE * min_silence_ms // 1000
    pad = RATE * pad_ms // 1000
    segs, triggered, start, temp_end = [], False, 0, 0
    for i, p in enumerate(probs):
        cur = WINDOW * i
        if p >= threshold and temp_end:
            temp_end = 0
        if p >= threshold and not triggered:
            triggered, start = True, cur
            continue
        if p < neg and triggered:
            if not temp_end:
                temp_end = cur
            if cur - temp_end < min_silence:
                continue
            if temp_end - start > min_speech:
                segs.append([start, temp_end])
            temp_end, triggered = 0, False
    if triggered and n_samples - start > min_speech:
        segs.append([start, n_samples])
    for i, s in enumerate(segs):
        if i == 0:
            s[0] = max(0, s[0] - pad)
        if i + 1 < len(segs):
            gap = segs[i + 1][0] - s[1]
            if gap < 2 * pad:
                s[1] += gap // 2
                segs[i + 1][0] = max(0, segs[i + 1][0] - gap // 2)
            else:
                s[1] = min(n_samples, s[1] + pad)
                segs[i + 1][0] = max(0, segs[i + 1][0] - pad)
        else:
            s[1] = min(n_samples, s[1] + pad)
    return segs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ggml", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("clips", nargs="+")
    a = ap.parse_args()
    weights = load_ggml(a.ggml)
    result = {}
    for clip in a.clips:
        x = read_wav16k(clip)
        model = NumpySilero(weights)
        numpy_probs = [model(c) for c in windows(x)]
        onnx = onnx_probs(a.onnx, x)
        result[clip] = {
            "n_samples": len(x),
            "onnx_probs": onnx,
            "numpy_probs": numpy_probs,
            "onnx_segments": speech_segments(onnx, len(x)),
        }
        d = np.abs(np.array(onnx) - np.array(numpy_probs))
        print(f"{clip}: {len(onnx)} windows, numpy vs onnx max {d.max():.2e}, "
              f"{len(result[clip]['onnx_segments'])} segments")
    with open(a.out + ".partial", "w") as f:
        json.dump(result, f)
    import os
    os.replace(a.out + ".partial", a.out)


if __name__ == "__main__":
    main()
