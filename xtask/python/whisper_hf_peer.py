"""A GPU peer for audiocpp's Whisper (issue #40): Hugging Face transformers'
WhisperForConditionalGeneration in PyTorch, greedy, batch 1, with its weights converted
from the same CTranslate2 (faster-whisper) model folder that audiocpp converts, so both
run the same numbers. Nothing is downloaded: the model config, generation config,
feature extractor and tokenizer are all built from the folder's model.bin, config.json
and tokenizer.json.

Each audio file is transcribed long-form the way faster-whisper and audiocpp do it:
temperature 0 only (no fallback), timestamp tokens on (each 30 s window is read, the next
one starting at the last timestamp), no previous-text prompt; the multilingual models
are forced to English / transcribe. One warm-up run, then `--repeats` timed runs; a run's
time is feature extraction + generate + detokenization (synchronized on CUDA). Prints
the text, the median seconds and the real-time factor (seconds / audio duration) per
clip; with `--json` also one JSON object per clip on its own line. With
`--compare-text FILE` (a plain transcript, or audiocpp_cli's key=value output with a
`text=` line) it prints the word error rate of the peer's text against it (lower case,
punctuation stripped) to show the conversion reproduces audiocpp's transcript.

Works with transformers 4.57 and 5.x (torch, numpy, tokenizers needed).

Usage: whisper_hf_peer.py --ct2 DIR --audio WAV [--audio WAV ...] [--device cuda|cpu]
                          [--dtype float16|float32] [--repeats N] [--json]
                          [--compare-text FILE [--compare-text FILE ...]]
"""
import argparse
import json
import re
import statistics
import struct
import sys
import time
import wave

import numpy as np

RATE = 16000
CHUNK_S = 30

# CTranslate2 element type ids (see engine/src/families/whisper/ct2.rs).
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
BF16_ID = 5


def read_wav16k(path):
    """16 kHz mono s16 WAV -> float32 samples in [-1, 1)."""
    with wave.open(path) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


def read_ct2(path):
    """Parses a CTranslate2 model.bin (binary versions 5 and 6): header, variables
    (name, shape, type, bytes) and aliases. Returns (spec name, {name: ndarray}) with
    every alias resolved to its target's array."""
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0]

    def string():
        # u16 length including the trailing NUL, then the bytes.
        nonlocal pos
        n = take("H")
        s = buf[pos:pos + n - 1].decode("utf-8")
        pos += n
        return s

    version = take("I")
    if version not in (5, 6):
        sys.exit(f"{path}: CTranslate2 binary version {version} is not supported (5 or 6)")
    spec = string()
    take("I")  # spec revision
    variables = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        type_id = take("B")
        nbytes = take("I")
        raw = buf[pos:pos + nbytes]
        pos += nbytes
        if type_id == BF16_ID:  # widen bfloat16 to float32 by shifting into the high half
            arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif type_id in CT2_DTYPES:
            arr = np.frombuffer(raw, CT2_DTYPES[type_id])
        else:
            sys.exit(f"{path}: variable {name} has unknown type id {type_id}")
        variables[name] = arr.reshape(shape)
    for _ in range(take("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    assert pos == len(buf), f"{path}: {len(buf) - pos} trailing bytes"
    return spec, variables


def count_layers(v, prefix):
    """Number of `{prefix}/layer_{i}/` blocks present."""
    n = 0
    while any(k.startswith(f"{prefix}/layer_{n}/") for k in v):
        n += 1
    return n


def special_ids(tokenizer_json):
    """Special token name -> id from tokenizer.json's added tokens (eot, sot, language,
    task, no-timestamps ...); timestamp tokens follow <|notimestamps|>."""
    tok = json.load(open(tokenizer_json, encoding="utf-8"))
    return {t["content"]: t["id"] for t in tok["added_tokens"]}


def whisper_config(v, specials):
    """A transformers WhisperConfig from the CT2 tensor shapes (widths, layers, heads,
    vocabulary, mel bins, context lengths) and the tokenizer's special ids."""
    from transformers import WhisperConfig

    vocab, d_model = v["decoder/embeddings/weight"].shape
    eot = specials["<|endoftext|>"]
    return WhisperConfig(
        vocab_size=int(vocab),
        num_mel_bins=int(v["encoder/conv1/weight"].shape[1]),
        d_model=int(d_model),
        encoder_layers=count_layers(v, "encoder"),
        decoder_layers=count_layers(v, "decoder"),
        encoder_attention_heads=int(v["encoder/num_heads"]),
        decoder_attention_heads=int(v["decoder/num_heads"]),
        encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        max_source_positions=int(v["encoder/position_encodings/encodings"].shape[0]),
        max_target_positions=int(v["decoder/position_encodings/encodings"].shape[0]),
        activation_function="gelu",
        scale_embedding=False,
        tie_word_embeddings=True,
        decoder_start_token_id=specials["<|startoftranscript|>"],
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        # Generation rules live in the generation config; keep the model config neutral.
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )


# CT2 variables that carry no weight for the HF model, with why they can be dropped:
# flags whose values are checked in check_flags(), head counts read into the config,
# and the alignment heads (only for word timestamps, not used here).
UNUSED_OK = {
    "decoder/activation", "decoder/alibi", "decoder/pre_norm", "decoder/scale_embeddings",
    "decoder/start_from_zero_embedding", "encoder/num_heads", "decoder/num_heads",
    "decoder/alignment_heads", "decoder/alignment_layer",
    # Tied to decoder/embeddings/weight (an alias); HF ties proj_out the same way.
    "decoder/projection/weight",
}


def check_flags(v):
    """The CT2 flags must describe plain Whisper: GELU (3), pre-norm, no ALiBi, no
    embedding scaling, positions from 0."""
    want = {"decoder/activation": 3, "decoder/alibi": 0, "decoder/pre_norm": 1,
            "decoder/scale_embeddings": 0, "decoder/start_from_zero_embedding": 0}
    for name, value in want.items():
        if name in v and int(v[name]) != value:
            sys.exit(f"CT2 flag {name}={int(v[name])}, expected {value}: not a Whisper model")


def ct2_to_hf(v, cfg):
    """Maps every CT2 tensor to HF Whisper state-dict names, splitting CT2's fused
    projections (self-attention qkv, cross-attention kv). HF's k_proj has no bias;
    CT2 stores zeros there (a key bias shifts every score of a query by the same amount,
    so softmax ignores it anyway); a non-zero one is reported. Returns (state dict,
    names of CT2 variables used)."""
    import torch

    sd, used = {}, set()

    def get(name):
        used.add(name)
        return v[name]

    def put(hf, ct2):
        sd[hf] = torch.from_numpy(np.array(get(ct2), dtype=np.float32))

    def put_array(hf, arr):
        sd[hf] = torch.from_numpy(np.array(arr, dtype=np.float32))

    def split(ct2, n):
        w, b = get(ct2 + "/weight"), get(ct2 + "/bias")
        return np.split(w, n, axis=0), np.split(b, n, axis=0)

    def check_k_bias(bk, where):
        if np.abs(bk.astype(np.float32)).max() > 0:
            print(f"note: {where} has a non-zero key bias, dropped (softmax ignores it)", file=sys.stderr)

    def norm(hf, ct2):
        put(hf + ".weight", ct2 + "/gamma")
        put(hf + ".bias", ct2 + "/beta")

    def linear(hf, ct2):
        put(hf + ".weight", ct2 + "/weight")
        put(hf + ".bias", ct2 + "/bias")

    def key_value_out(hf, ct2, kv, out):
        # The key and value halves of a fused projection (HF's k_proj has no bias),
        # then the output projection and the block's norm.
        (wk, wv), (bk, bv) = kv
        check_k_bias(bk, ct2)
        put_array(hf + ".k_proj.weight", wk)
        put_array(hf + ".v_proj.weight", wv), put_array(hf + ".v_proj.bias", bv)
        linear(hf + ".out_proj", ct2 + out)
        norm(hf + "_layer_norm", ct2 + "/layer_norm")

    def self_attn(hf, ct2):
        (wq, wk, wv), (bq, bk, bv) = split(ct2 + "/linear_0", 3)
        put_array(hf + ".q_proj.weight", wq), put_array(hf + ".q_proj.bias", bq)
        key_value_out(hf, ct2, ((wk, wv), (bk, bv)), "/linear_1")

    def cross_attn(hf, ct2):
        linear(hf + ".q_proj", ct2 + "/linear_0")
        key_value_out(hf, ct2, split(ct2 + "/linear_1", 2), "/linear_2")

    def ffn(hf, ct2):
        norm(hf + "final_layer_norm", ct2 + "/layer_norm")
        linear(hf + "fc1", ct2 + "/linear_0")
        linear(hf + "fc2", ct2 + "/linear_1")

    linear("model.encoder.conv1", "encoder/conv1")
    linear("model.encoder.conv2", "encoder/conv2")
    put("model.decoder.embed_tokens.weight", "decoder/embeddings/weight")
    # The encoder's and the decoder's layers differ only in the decoder's cross-attention.
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        top = f"model.{side}"
        put(top + ".embed_positions.weight", f"{side}/position_encodings/encodings")
        for i in range(layers):
            hf, ct2 = f"{top}.layers.{i}", f"{side}/layer_{i}"
            self_attn(hf + ".self_attn", ct2 + "/self_attention")
            if side == "decoder":
                cross_attn(hf + ".encoder_attn", ct2 + "/attention")
            ffn(hf + ".", ct2 + "/ffn")
        norm(top + ".layer_norm", f"{side}/layer_norm")
    return sd, used


def load_model(ct2_dir, device, dtype):
    """Reads the CT2 folder into a WhisperForConditionalGeneration with strict checks:
    every HF parameter filled, no CT2 tensor left over except UNUSED_OK, output projection
    tied to the token embedding. Returns (model, config, CT2 variables, special ids)."""
    import torch
    from transformers import WhisperForConditionalGeneration

    spec, v = read_ct2(f"{ct2_dir}/model.bin")
    if spec != "WhisperSpec":
        sys.exit(f"{ct2_dir}: CTranslate2 spec {spec}, expected WhisperSpec")
    check_flags(v)
    specials = special_ids(f"{ct2_dir}/tokenizer.json")
    cfg = whisper_config(v, specials)
    sd, used = ct2_to_hf(v, cfg)
    left = set(v) - used - UNUSED_OK
    if left:
        sys.exit(f"CT2 variables not mapped: {sorted(left)}")
    model = WhisperForConditionalGeneration(cfg)
    # HF lists the tied proj_out.weight in its state dict (transformers 4) or not (5);
    # give it the embedding when asked for so the strict load below sees every key.
    want = set(model.state_dict())
    if "proj_out.weight" in want:
        sd["proj_out.weight"] = sd["model.decoder.embed_tokens.weight"]
    missing, extra = want - set(sd), set(sd) - want
    if missing or extra:
        sys.exit(f"state dict mismatch: missing {sorted(missing)}, unexpected {sorted(extra)}")
    model.load_state_dict(sd, strict=True)
    model.tie_weights()
    emb, proj = model.model.decoder.embed_tokens.weight, model.proj_out.weight
    assert proj.data_ptr() == emb.data_ptr() or torch.equal(proj, emb), "proj_out not tied"
    model = model.to(device=device, dtype=dtype).eval()
    return model, cfg, v, specials


def generation_config(ct2_dir, cfg, specials):
    """The Whisper generation config, by hand from config.json and the special ids:
    suppression lists (config.json's suppress_ids plus the task/control tokens that
    faster-whisper and audiocpp always suppress), timestamp rules, and for multilingual
    models the language/task tables with English / transcribe forced."""
    from transformers import GenerationConfig

    c = json.load(open(f"{ct2_dir}/config.json"))
    id_to_tok = {i: t for t, i in specials.items()}
    eot = specials["<|endoftext|>"]
    no_speech = specials.get("<|nospeech|>", specials.get("<|nocaptions|>"))
    control = [specials[t] for t in ("<|transcribe|>", "<|translate|>", "<|startoftranscript|>",
                                     "<|startofprev|>", "<|startoflm|>")] + [no_speech]
    suppress = sorted(set(c.get("suppress_ids", [])) | set(control))
    multilingual = cfg.vocab_size >= 51865  # English-only models have 51864 tokens
    gc = GenerationConfig(
        decoder_start_token_id=specials["<|startoftranscript|>"],
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        no_timestamps_token_id=specials["<|notimestamps|>"],
        prev_sot_token_id=specials["<|startofprev|>"],
        suppress_tokens=suppress,
        begin_suppress_tokens=list(c.get("suppress_ids_begin", [220, eot])),
        max_initial_timestamp_index=50,
        max_length=cfg.max_target_positions,
        is_multilingual=multilingual,
        alignment_heads=c.get("alignment_heads"),
        do_sample=False,
        num_beams=1,
    )
    if multilingual:
        gc.lang_to_id = {id_to_tok[i]: i for i in c["lang_ids"]}
        gc.task_to_id = {"transcribe": specials["<|transcribe|>"], "translate": specials["<|translate|>"]}
    return gc


def transcribe(model, fe, gc, tok, eot, audio, device, dtype):
    """One long-form transcription: features of the whole file (padded to 30 s when
    shorter, as generate needs 3000 frames for short form), greedy generate with
    timestamps, then the text tokens (ids below <|endoftext|>) detokenized."""
    import torch

    padding = "longest" if len(audio) > CHUNK_S * RATE else "max_length"
    feats = fe(audio, sampling_rate=RATE, return_tensors="pt", truncation=False,
               padding=padding, return_attention_mask=True)
    # gc is also the model's generation_config (set in main), so neither version merges
    # in defaults; besides it only Whisper's own long-form arguments are passed.
    kwargs = dict(generation_config=gc, return_timestamps=True, condition_on_prev_tokens=False,
                  temperature=0.0)
    if gc.is_multilingual:
        kwargs.update(language="en", task="transcribe")
    with torch.inference_mode():
        out = model.generate(feats.input_features.to(device=device, dtype=dtype),
                             attention_mask=feats.attention_mask.to(device), **kwargs)
    seq = out["sequences"] if isinstance(out, dict) else out
    ids = [int(t) for t in seq[0].tolist() if 0 <= int(t) < eot]
    return tok.decode(ids, skip_special_tokens=True).strip()


def sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def words(text):
    """Lower case, punctuation stripped (apostrophes and inner hyphens kept), split."""
    text = text.lower().replace("-", " ")
    return re.sub(r"[^\w\s']", " ", text).split()


def wer(hyp, ref):
    """Word error rate of hyp against ref (word-level Levenshtein / len(ref)), and the
    aligned differences as (ref word, hyp word) pairs ('' for an insertion/deletion)."""
    h, r = words(hyp), words(ref)
    d = np.zeros((len(r) + 1, len(h) + 1), np.int32)
    d[:, 0], d[0, :] = np.arange(len(r) + 1), np.arange(len(h) + 1)
    for i in range(1, len(r) + 1):
        for j in range(1, len(h) + 1):
            d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (r[i - 1] != h[j - 1]))
    diffs, i, j = [], len(r), len(h)
    while i > 0 or j > 0:  # walk back to list the differing words
        if i > 0 and j > 0 and d[i, j] == d[i - 1, j - 1] + (r[i - 1] != h[j - 1]):
            if r[i - 1] != h[j - 1]:
                diffs.append((r[i - 1], h[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and d[i, j] == d[i - 1, j] + 1:
            diffs.append((r[i - 1], "")); i -= 1
        else:
            diffs.append(("", h[j - 1])); j -= 1
    return d[len(r), len(h)] / max(len(r), 1), diffs[::-1]


def read_reference(path):
    """A transcript file: audiocpp_cli's key=value output (its `text=` line) or plain text."""
    lines = open(path, encoding="utf-8").read().splitlines()
    for line in lines:
        if line.startswith("text="):
            return line[len("text="):]
    return " ".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ct2", required=True, help="CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json)")
    ap.add_argument("--audio", action="append", required=True, help="16 kHz mono s16 WAV (repeatable)")
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--dtype", default="float16", choices=["float16", "float32"])
    ap.add_argument("--repeats", type=int, default=3, help="timed runs after one warm-up")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (device cpu)")
    ap.add_argument("--json", action="store_true", help="also one JSON line per clip")
    ap.add_argument("--compare-text", action="append", default=[],
                    help="transcript to compute the WER against, one per --audio in order")
    args = ap.parse_args(argv)
    if args.compare_text and len(args.compare_text) != len(args.audio):
        sys.exit("give one --compare-text per --audio")

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import WhisperFeatureExtractor

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model, cfg, _, specials = load_model(args.ct2, args.device, dtype)
    gc = generation_config(args.ct2, cfg, specials)
    model.generation_config = gc
    fe = WhisperFeatureExtractor(feature_size=cfg.num_mel_bins, sampling_rate=RATE, hop_length=160,
                                 chunk_length=CHUNK_S, n_fft=400, padding_value=0.0)
    tok = Tokenizer.from_file(f"{args.ct2}/tokenizer.json")
    eot = specials["<|endoftext|>"]

    for k, path in enumerate(args.audio):
        audio = read_wav16k(path)
        audio_s = len(audio) / RATE
        text, runs = None, []
        for rep in range(args.repeats + 1):  # the first run warms up and is not timed
            sync(args.device)
            t0 = time.perf_counter()
            text = transcribe(model, fe, gc, tok, eot, audio, args.device, dtype)
            sync(args.device)
            if rep:
                runs.append(time.perf_counter() - t0)
        med = statistics.median(runs) if runs else float("nan")
        print(f"{path}: {audio_s:.2f} s audio, median {med:.3f} s, RTF {med / audio_s:.4f} "
              f"({args.device} {args.dtype}, runs {[round(r, 3) for r in runs]})")
        print(f"text: {text}")
        err = None
        if args.compare_text:
            err, diffs = wer(text, read_reference(args.compare_text[k]))
            print(f"WER vs {args.compare_text[k]}: {err:.4f}")
            for ref_w, hyp_w in diffs:
                print(f"  ours '{ref_w}' -> peer '{hyp_w}'")
        if args.json:
            print(json.dumps({"audio": path, "audio_s": audio_s, "text": text, "median_s": med,
                              "runs_s": runs, "device": args.device, "dtype": args.dtype, "wer_vs_compare": err,
                              "torch": torch.__version__, "transformers": transformers.__version__}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
