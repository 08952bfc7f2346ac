#!/usr/bin/env python3
"""Qwen3-TTS-12Hz voice cloning (Base) and voice design (VoiceDesign) fixtures from the official code.

Companion of xtask/python/qwen3_tts_fixtures.py (CustomVoice), whose helpers it imports: the
fixture text tokenizer, the deterministic per-tensor random weights, the checkpoint
conventions (BF16 model.safetensors, F32 speech_tokenizer/, the speaker_encoder_config
model_type fix), the ArrayStore (.json index + little-endian .bin) and the generation capture.

No real weights can be fetched here, so this builds two reduced checkpoints of the real
architecture with RANDOM weights through the official `qwen-tts==0.1.1` classes, saves them in
the release folder layout, loads them back through `qwen_tts.Qwen3TTSModel.from_pretrained`
and records what the official API computes:

  base/            tts_model_type "base" (1.7B shape: talker 12 -> code predictor 6 through a
                   Linear small_to_mtp_projection, GQA), with the ECAPA-TDNN speaker encoder
                   (`speaker_encoder.*`, real layer structure, reduced channels) and a
                   speech_tokenizer WITH its encoder (transformers MimiModel-based
                   Qwen3TTSTokenizerV2Encoder: SEANet, transformer, downsample, split RVQ; 18
                   quantizers of which the first 16 are kept, as the release keeps 16 of 32)
  voice_design/    tts_model_type "voice_design" (1.7B shape: talker 8 -> code predictor 4)
  ref_24k.wav      the reference clip (espeak-ng, 16-bit PCM mono 24 kHz) and its transcript
  ref_16k.wav      the same clip at 16 kHz (the official code resamples it with librosa/soxr_hq)
  expected_base.json/.bin          create_voice_clone_prompt, the speaker encoder (mel, every
                                   block), the codec encoder stage by stage, and
                                   generate_voice_clone in ICL and x-vector-only modes
  expected_voice_design.json/.bin  generate_voice_design
  README.md

Run (deterministic; about a minute on one core):
  nice /work/venvs/qwen3/bin/python xtask/python/qwen3_tts_clone_fixtures.py \
      --out engine/tests/fixtures/qwen3_tts_clone
Other modes:
  --list-tensors   print every speaker-encoder and codec-encoder tensor (name, shape) of the
                   fixture and of the real 1.7B / 0.6B Base (built on the meta device), as Markdown
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen3_tts_fixtures as fx  # noqa: E402
from qwen3_tts_fixtures import (  # noqa: E402
    GENERATION_DEFAULTS, REAL_CODEC_IDS, REAL_LANGUAGE_IDS, ArrayStore, Capture, _normalize_json,
    _register, _rng_for, build_fixture_tokenizer, calibrate_codec_output, file_listing,
    fix_saved_config, init_weights, log, top2_margin, top_k, write_tokenizer_files,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "engine" / "tests" / "fixtures" / "qwen3_tts_clone"

REF_TEXT = "Hello, this is a short reference clip."
ESPEAK_CMD = ["espeak-ng", "-v", "en-us", "-s", "165"]
REF_24K_SAMPLES = 57131   # 2.380 s; not a multiple of 1920, so the codec pads the last frame
REF_16K_SAMPLES = 38087
REF_PEAK = 0.6

MAX_NEW_TOKENS = {"base": 11, "voice_design": 11}  # N-1 frames come out when no EOS


# =======================================================================================
# Configurations
# =======================================================================================

def _talker_cfg(talker: dict, cp: dict, languages: list, text_vocab: int) -> dict:
    mrope = talker.pop("mrope_section")
    return dict(
        vocab_size=3072, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000,
        rope_scaling={"interleaved": True, "mrope_section": mrope, "rope_type": "default"},
        hidden_act="silu", attention_bias=False, num_code_groups=16,
        text_vocab_size=text_vocab, position_id_per_seconds=13, initializer_range=0.02,
        spk_id={}, spk_is_dialect={},  # Base / VoiceDesign: no named speakers
        codec_language_id={l: REAL_LANGUAGE_IDS[l] for l in languages},
        code_predictor_config=dict(
            vocab_size=2048, max_position_embeddings=65536, rms_norm_eps=1e-6,
            rope_theta=1000000, rope_scaling=None, hidden_act="silu", attention_bias=False,
            num_code_groups=16, initializer_range=0.02, use_sliding_window=False, **cp),
        **REAL_CODEC_IDS, **talker,
    )


def _decoder_cfg() -> dict:
    # Reduced codec decoder (the decoder was verified with the real 1920x upsampling by the
    # CustomVoice fixture tiny_b): 96 samples per frame keeps these fixtures small.
    return dict(
        codebook_size=2048, num_quantizers=16, num_semantic_quantizers=1, semantic_codebook_size=4096,
        vector_quantization_hidden_dimension=4, max_position_embeddings=8000, rope_theta=10000,
        rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False, layer_scale_initial_scale=0.01,
        attention_dropout=0.0, codebook_dim=4, latent_dim=16, decoder_dim=32, hidden_size=16,
        intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=4, sliding_window=8, upsample_rates=[3, 2, 2, 2], upsampling_ratios=[2, 2])


# The codec encoder (transformers MimiConfig). Real Qwen3-TTS-Tokenizer-12Hz: num_filters 64,
# hidden 512, 8 layers, 8 heads (kv 8), head_dim 64, intermediate 2048, 32 quantizers of 2048 x 256
# (16 kept). Here: same structure, reduced widths, GQA in the transformer, 18 quantizers x 256 x 4.
ENCODER_CFG = dict(
    audio_channels=1, num_filters=2, kernel_size=7, residual_kernel_size=3, last_kernel_size=3,
    num_residual_layers=1, dilation_growth_rate=2, compress=2, upsampling_ratios=[8, 6, 5, 4],
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    intermediate_size=64, hidden_act="gelu", norm_eps=1e-5, layer_scale_initial_scale=0.01,
    rope_theta=10000.0, max_position_embeddings=8000, sliding_window=250, num_quantizers=18,
    num_semantic_quantizers=1, codebook_size=256, codebook_dim=4, vector_quantization_hidden_dimension=4,
    pad_mode="constant", use_causal_conv=True, use_conv_shortcut=False, trim_right_ratio=1.0,
    sampling_rate=24000, frame_rate=12.5, upsample_groups=32,
)
REAL_ENCODER_CFG = dict(fx.full_configs()["codec"]["encoder_config"], upsample_groups=512)

# ECAPA-TDNN: real = the config class defaults (enc_channels [512,512,512,512,1536], kernels
# [5,3,3,3,1], dilations [1,2,3,4,1], attention 128, res2net scale 8, SE 128, mel 128) with
# enc_dim = talker hidden (2048 for 1.7B, 1024 for 0.6B). Here: channels / 16, same structure.
SPEAKER_CFG = dict(mel_dim=128, enc_dim=12, enc_channels=[32, 32, 32, 32, 96],
                   enc_kernel_sizes=[5, 3, 3, 3, 1], enc_dilations=[1, 2, 3, 4, 1],
                   enc_attention_channels=16, enc_res2net_scale=8, enc_se_channels=8, sample_rate=24000)


def clone_configs(name: str, tokd: dict) -> dict:
    text_vocab = int(math.ceil((tokd["n_total"] + 1) / 128.0) * 128)
    ids = tokd["ids"]
    common_top = dict(
        tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="1b7",
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<tts_pad>"], tts_bos_token_id=ids["<tts_text_bos>"],
        tts_eos_token_id=ids["<tts_text_eod>"],
    )
    if name == "base":
        languages = ["chinese", "english", "japanese", "korean", "german"]
        talker = dict(hidden_size=12, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      text_hidden_size=12, mrope_section=[2, 1, 1])
        cp = dict(hidden_size=6, intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=4)
        top = dict(talker_config=_talker_cfg(talker, cp, languages, text_vocab),
                   speaker_encoder_config=dict(SPEAKER_CFG), tts_model_type="base", **common_top)
        seed = 310  # chosen among 301..312: wide minimum top-2 gaps and varied group-0 codes
    elif name == "voice_design":
        languages = ["chinese", "english", "japanese", "french"]
        talker = dict(hidden_size=8, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      text_hidden_size=16, mrope_section=[2, 1, 1])
        cp = dict(hidden_size=4, intermediate_size=12, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=4)
        top = dict(talker_config=_talker_cfg(talker, cp, languages, text_vocab),
                   speaker_encoder_config={"enc_dim": 8, "sample_rate": 24000},
                   tts_model_type="voice_design", **common_top)
        seed = 406  # chosen among 401..408
    else:
        raise ValueError(name)
    dec = _decoder_cfg()
    total_up = int(np.prod(dec["upsample_rates"]) * np.prod(dec["upsampling_ratios"]))
    codec = dict(encoder_config=dict(ENCODER_CFG), decoder_config=dec,
                 encoder_valid_num_quantizers=16, input_sample_rate=24000, output_sample_rate=24000,
                 decode_upsample_rate=total_up, encode_downsample_rate=1920)
    return dict(name=name, top=top, codec=codec, seed=seed)


# =======================================================================================
# The reference clip
# =======================================================================================

def make_reference_clips(out: Path, keep: dict | None) -> dict:
    """ref_24k.wav / ref_16k.wav. If `keep` holds the bytes of committed clips they are
    reused (espeak-ng output can change between its versions); otherwise espeak-ng speaks
    REF_TEXT at its native 22050 Hz, the clip is resampled with soxr VHQ to 24 kHz, trimmed
    to REF_24K_SAMPLES, peak-normalised to REF_PEAK and stored as 16-bit PCM; ref_16k.wav is
    that 24 kHz clip resampled (soxr VHQ) to 16 kHz and trimmed to REF_16K_SAMPLES."""
    import soundfile as sf
    import soxr
    info = dict(text=REF_TEXT, source=(
        f"{' '.join(ESPEAK_CMD)} '{REF_TEXT}' (eSpeak NG 1.51), native 22050 Hz, soxr VHQ to 24 kHz, "
        f"first {REF_24K_SAMPLES} samples, peak {REF_PEAK}, 16-bit; ref_16k.wav = that clip soxr VHQ to "
        f"16 kHz, first {REF_16K_SAMPLES} samples, 16-bit"))
    if keep and "ref_24k.wav" in keep and "ref_16k.wav" in keep:
        for k, v in keep.items():
            (out / k).write_bytes(v)
        info["this_run"] = "reused the committed clips"
    else:
        tmp = Path(tempfile.mkdtemp())
        try:
            ver = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip()
            subprocess.run(ESPEAK_CMD + ["-w", str(tmp / "es.wav"), REF_TEXT], check=True)
            y, sr = sf.read(tmp / "es.wav", dtype="float64")
        finally:
            shutil.rmtree(tmp)
        y24 = soxr.resample(y, sr, 24000, quality="VHQ")[:REF_24K_SAMPLES]
        y24 = y24 / np.abs(y24).max() * REF_PEAK
        pcm24 = np.round(y24 * 32767).astype(np.int16)
        sf.write(out / "ref_24k.wav", pcm24, 24000, subtype="PCM_16")
        y16 = soxr.resample(pcm24.astype(np.float64) / 32768.0, 24000, 16000, quality="VHQ")[:REF_16K_SAMPLES]
        pcm16 = np.round(np.clip(y16, -1, 32767 / 32768) * 32768).astype(np.int16)
        sf.write(out / "ref_16k.wav", pcm16, 16000, subtype="PCM_16")
        info["this_run"] = f"synthesised with {ver}"
    for f in ("ref_24k.wav", "ref_16k.wav"):
        d, sr = sf.read(out / f, dtype="int16")
        info[f] = dict(sample_rate=int(sr), samples=int(d.shape[0]), bytes=(out / f).stat().st_size,
                       seconds=round(d.shape[0] / sr, 4), format="RIFF WAVE, PCM 16-bit, mono",
                       sha256=fx.sha256_file(out / f))
    return info


def load_ref_like_official(path: Path):
    """What Qwen3TTSModel._load_audio_to_np does for a path: librosa.load(sr=None, mono=True)."""
    import librosa
    audio, sr = librosa.load(str(path), sr=None, mono=True)
    return audio.astype(np.float32), int(sr)


# =======================================================================================
# Weights: the CustomVoice scheme plus calibrated speaker encoder and codec-encoder codebooks
# =======================================================================================

def _sig3(x: np.ndarray) -> np.ndarray:
    """Round to 3 significant digits (keeps the calibrated codebooks stable under tiny
    numeric changes of a regeneration)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    nz = x != 0
    e = np.floor(np.log10(np.abs(x[nz])))
    out[nz] = np.round(x[nz] / 10 ** (e - 2)) * 10 ** (e - 2)
    return out


def calibrate_speaker_encoder(model, wav24: np.ndarray) -> dict:
    """Power-of-two scales (exact in BF16) on the first TDNN and the final fc so that the
    ECAPA activations stay O(1) and the x-vector has an RMS near 1 (it is fed to the talker
    like a codec-embedding row, whose entries have std 1 here)."""
    import torch
    se = model.speaker_encoder
    with torch.no_grad():
        mel = fx_mel(wav24)
        x = mel.transpose(1, 2)
        h0 = se.blocks[0](x)
        s0 = 2.0 ** round(math.log2(1.0 / max(float(h0.pow(2).mean().sqrt()), 1e-12)))
        se.blocks[0].conv.weight.mul_(s0)
        se.blocks[0].conv.bias.mul_(s0)
        xv = se(mel)
        s1 = 2.0 ** round(math.log2(1.0 / max(float(xv.pow(2).mean().sqrt()), 1e-12)))
        se.fc.weight.mul_(s1)
        se.fc.bias.mul_(s1)
        xv = se(mel)
    return dict(first_tdnn_scale=s0, fc_scale=s1, xvector_rms=float(xv.pow(2).mean().sqrt()))


def fx_mel(wav24: np.ndarray):
    """The official mel front end of extract_speaker_embedding (M:1943-1952)."""
    import torch
    from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram
    return mel_spectrogram(torch.from_numpy(wav24).unsqueeze(0), n_fft=1024, num_mels=128,
                           sampling_rate=24000, hop_size=256, win_size=1024, fmin=0,
                           fmax=12000).transpose(1, 2)


def calibrate_encoder_codebooks(codec_model, wav24: np.ndarray, seed: int, tries: int = 12) -> dict:
    """Fill the codebooks (see _fill_encoder_codebooks) with `tries` candidate seeds and keep
    the one whose kept quantizers (semantic 0, acoustic 0..14) have the widest minimum gap
    between the nearest and second-nearest codeword distances on the reference clip."""
    best = None
    for j in range(tries):
        st = _fill_encoder_codebooks(codec_model, wav24, seed * 100 + j)
        gap = min([st["semantic_residual_vector_quantizer.0"]["min_gap"]] +
                  [st[f"acoustic_residual_vector_quantizer.{q}"]["min_gap"] for q in range(15)])
        if best is None or gap > best[0]:
            best = (gap, seed * 100 + j)
    st = _fill_encoder_codebooks(codec_model, wav24, best[1])
    return dict(codebook_seed=best[1], candidates=tries, min_gap_kept=best[0], layers=st)


def _fill_encoder_codebooks(codec_model, wav24: np.ndarray, seed: int) -> dict:
    """The Mimi codebooks are buffers (embed_sum, cluster_usage, initialized), left at zeros
    by the parameter init. Fill them stage by stage from the reference clip: for each RVQ
    layer, codewords = mean of the residual that layer sees + std of the RVQ's input times
    N(0, 1) (per dimension, rounded to 3 significant digits), cluster_usage ~ U(0.5, 2),
    embed_sum = codeword * usage. The spread is kept constant over the layers so that the
    residual stays at a fixed scale and every layer's nearest-codeword choice keeps a wide
    distance gap (a geometric decay, as in a trained RVQ, makes the late layers' choices
    hinge on differences near f32 rounding)."""
    import torch
    enc = codec_model.encoder
    stats = {}
    with torch.no_grad():
        x = torch.from_numpy(wav24)[None, None]
        emb = enc.encoder(x)
        h = enc.encoder_transformer(emb.transpose(1, 2), return_dict=True).last_hidden_state
        ds = enc.downsample(h.transpose(1, 2))
        for rvq_name in ("semantic_residual_vector_quantizer", "acoustic_residual_vector_quantizer"):
            rvq = getattr(enc.quantizer, rvq_name)
            residual = rvq.input_proj(ds)  # [1, D, T]
            sd = _sig3(residual[0].T.numpy().astype(np.float64).std(0) + 1e-6)
            for qi, layer in enumerate(rvq.layers):
                name = f"encoder.quantizer.{rvq_name}.layers.{qi}.codebook"
                r = residual[0].T.numpy().astype(np.float64)  # [T, D]
                mu = _sig3(r.mean(0))
                rng = _rng_for(seed, name)
                k, d = layer.codebook.embed_sum.shape
                cw = mu[None] + sd[None] * rng.standard_normal((k, d))
                usage = rng.uniform(0.5, 2.0, k)
                layer.codebook.embed_sum.copy_(torch.from_numpy((cw * usage[:, None]).astype(np.float32)))
                layer.codebook.cluster_usage.copy_(torch.from_numpy(usage.astype(np.float32)))
                layer.codebook.initialized.fill_(1.0)
                layer.codebook._embed = None  # the embed property caches embed_sum / usage
                idx = layer.encode(residual)
                d = torch.cdist(residual[0].T[None].float(), layer.codebook.embed[None].float(), p=2)[0]
                sd2 = torch.sort(d, dim=-1).values
                residual = residual - layer.decode(idx)
                stats[f"{rvq_name}.{qi}"] = dict(rms_in=float(np.sqrt((r ** 2).mean())),
                                                  distinct_codes=int(len(set(idx[0].tolist()))),
                                                  min_gap=float((sd2[:, 1] - sd2[:, 0]).min()))
    return stats


def save_clone_checkpoint(cfgs: dict, tok_files: dict, out: Path, wav24: np.ndarray) -> dict:
    import torch
    from transformers import EncodecFeatureExtractor, GenerationConfig
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    _register()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    seed = cfgs["seed"]
    info = {}

    config = Qwen3TTSConfig(**json.loads(json.dumps(cfgs["top"])))
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(config)
    init_weights(model, seed)
    model.eval()
    if model.speaker_encoder is not None:
        info["speaker_encoder_calibration"] = calibrate_speaker_encoder(model, wav24)
    model = model.to(torch.bfloat16)  # the releases ship BF16 weights (speaker encoder included)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    info["fixed_config_keys"] = fix_saved_config(out / "config.json")
    GenerationConfig(**GENERATION_DEFAULTS).save_pretrained(out)
    del model
    for fname, data in tok_files.items():
        (out / fname).write_bytes(data)
    (out / "preprocessor_config.json").write_text(json.dumps(
        {"processor_class": "Qwen3TTSProcessor"}, indent=2) + "\n", encoding="utf-8")

    st = out / "speech_tokenizer"
    codec_config = Qwen3TTSTokenizerV2Config(**json.loads(json.dumps(cfgs["codec"])))
    torch.manual_seed(seed + 1)
    codec = Qwen3TTSTokenizerV2Model(codec_config)
    init_weights(codec, seed + 1)
    codec.eval()
    info["codec_last_conv_scale"] = calibrate_codec_output(codec, seed + 2)
    info["encoder_codebook_calibration"] = calibrate_encoder_codebooks(codec, wav24, seed + 3)
    codec.save_pretrained(st, safe_serialization=True)
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24000, padding_side="right",
                            padding_value=0.0, return_attention_mask=True).save_pretrained(st)
    (st / "configuration.json").write_text(json.dumps(
        {"framework": "pytorch", "task": "feature-extraction", "allow_remote": True}) + "\n",
        encoding="utf-8")
    _normalize_json(st / "config.json")
    del codec
    return info


# =======================================================================================
# Prompt layout (row by row) of the Base model
# =======================================================================================

def expected_layout_clone(cfg, input_ids: list, ref_ids, n_ref_frames: int, language: str,
                          icl: bool, non_streaming: bool):
    """The talker prompt of `Qwen3TTSForConditionalGeneration.generate` for generate_voice_clone
    (M:2086-2234). Text part: token id (text_projection(text_embedding(id))) or
    tts_pad/tts_bos/tts_eos, or null. Codec part: codec id (talker.model.codec_embedding),
    "xvector" (the speaker embedding itself), {"ref_frame": k} (sum of the 16 codebook
    embeddings of reference frame k: talker codec_embedding for code 0, code_predictor
    codec_embedding[g-1] for code g), or null."""
    tc = cfg.talker_config
    lang = language.lower()
    language_id = None if lang == "auto" else tc.codec_language_id[lang]
    if language_id is None:
        prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
    else:
        prefix = [tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]
    codec_seq = prefix + ["xvector", tc.codec_pad_id, tc.codec_bos_id]
    rows = [{"text": int(t), "codec": None} for t in input_ids[:3]]
    n = len(codec_seq)
    for i in range(n - 1):
        rows.append({"text": "tts_pad" if i < n - 2 else "tts_bos", "codec": codec_seq[i]})
    if icl:
        text_rows = [int(t) for t in ref_ids[3:-2]] + [int(t) for t in input_ids[3:-5]] + ["tts_eos"]
        codec_rows = [tc.codec_bos_id] + [{"ref_frame": k} for k in range(n_ref_frames)]
        if non_streaming:
            rows += [{"text": t, "codec": tc.codec_pad_id} for t in text_rows]
            rows += [{"text": "tts_pad", "codec": c} for c in codec_rows]
            trailing = ["tts_pad"]
        elif len(text_rows) > len(codec_rows):
            rows += [{"text": t, "codec": c} for t, c in zip(text_rows, codec_rows)]
            trailing = text_rows[len(codec_rows):]
        else:
            rows += [{"text": text_rows[i] if i < len(text_rows) else "tts_pad", "codec": c}
                     for i, c in enumerate(codec_rows)]
            trailing = ["tts_pad"]
    elif non_streaming:
        rows += [{"text": int(t), "codec": tc.codec_pad_id} for t in input_ids[3:-5]]
        rows.append({"text": "tts_eos", "codec": tc.codec_pad_id})
        rows.append({"text": "tts_pad", "codec": tc.codec_bos_id})
        trailing = ["tts_pad"]
    else:
        rows.append({"text": int(input_ids[3]), "codec": tc.codec_bos_id})
        trailing = [int(t) for t in input_ids[4:-5]] + ["tts_eos"]
    return rows, codec_seq, language_id, trailing


def embed_rows(model, rows, xvector=None, ref_code=None):
    import torch
    talker = model.talker
    cfg = model.config
    special = {"tts_pad": cfg.tts_pad_token_id, "tts_bos": cfg.tts_bos_token_id,
               "tts_eos": cfg.tts_eos_token_id}
    cp_emb = talker.code_predictor.get_input_embeddings()
    out = []
    with torch.no_grad():
        for r in rows:
            e = torch.zeros(cfg.talker_config.hidden_size)
            if r["text"] is not None:
                tid = special.get(r["text"], r["text"])
                e = e + talker.text_projection(talker.get_text_embeddings()(torch.tensor([[tid]])))[0, 0]
            c = r["codec"]
            if c == "xvector":
                e = e + xvector.float()
            elif isinstance(c, dict):
                fr = ref_code[c["ref_frame"]]
                s = talker.get_input_embeddings()(torch.tensor([[int(fr[0])]]))[0, 0]
                for g in range(1, 16):
                    s = s + cp_emb[g - 1](torch.tensor([[int(fr[g])]]))[0, 0]
                e = e + s
            elif c is not None:
                e = e + talker.get_input_embeddings()(torch.tensor([[int(c)]]))[0, 0]
            out.append(e)
    return torch.stack(out, 0)


# =======================================================================================
# Recording
# =======================================================================================

def _generation_record(tts, cap, store: ArrayStore, name: str, wavs, sr) -> dict:
    """Talker/code-predictor outputs of the last call (as qwen3_tts_fixtures.run_case)."""
    res = cap.talker_result
    codes = cap.gen_result[0][0].cpu().numpy().astype(np.int64)
    n_frames = int(codes.shape[0])
    group0 = res.sequences[0].tolist()
    scores = [s[0].float().numpy() for s in res.scores]
    logits = [l[0].float().numpy() for l in res.logits]
    tmg = [top2_margin(s) for s in scores]
    ttop = [float(np.max(s)) for s in scores]
    cmg, ctop = [], []
    for f, r in enumerate(cap.cp_results):
        cmg.append([top2_margin(s[0].float().numpy()) for s in r.scores])
        ctop.append([float(s[0].float().max()) for s in r.scores])
        if f < n_frames and r.sequences[0].tolist() != codes[f, 1:].tolist():
            raise RuntimeError("code predictor sequence != returned codes")
    if group0[:n_frames] != codes[:, 0].tolist():
        raise RuntimeError("talker tokens != group-0 codes")
    eos_id = tts.model.config.talker_config.codec_eos_token_id
    hidden_last = np.stack([h[0][-1][0, -1].float().numpy() for h in res.hidden_states])
    wav = np.asarray(wavs[0], dtype=np.float32)
    arrays = {
        "talker_logits_raw_first3": store.add(f"{name}/talker_logits_raw_first3", np.stack(logits[:3])),
        "talker_hidden_last": store.add(f"{name}/talker_hidden_last", hidden_last),
        "wav": store.add(f"{name}/wav", wav),
    }
    return dict(
        n_frames=n_frames, samples=int(wav.shape[0]), sample_rate=int(sr),
        stopped_by_eos=bool(eos_id in group0), talker_group0_tokens=group0, codes=codes.tolist(),
        talker_scores_top5_first3=[top_k(sc) for sc in scores[:3]],
        margins=dict(talker_group0=tmg, code_predictor=cmg, talker_group0_top1=ttop, code_predictor_top1=ctop),
        min_margin=dict(talker_group0=min(tmg), code_predictor=min(min(x) for x in cmg) if cmg else None),
        min_rel_margin=dict(
            talker_group0=min(a / max(abs(b), 1e-9) for a, b in zip(tmg, ttop)),
            code_predictor=min(a / max(abs(b), 1e-9) for ra, rb in zip(cmg, ctop) for a, b in zip(ra, rb))),
        fragile_steps=[dict(kind="talker", step=i, margin=m) for i, m in enumerate(tmg) if m < 1e-2] +
                      [dict(kind="code_predictor", frame=f, group=g + 1, margin=m)
                       for f, row in enumerate(cmg) for g, m in enumerate(row) if m < 1e-2],
        arrays=arrays,
    )


def _check_prompt(tts, cap, rows, trailing, xvector=None, ref_code=None):
    import torch
    m = tts.model
    prompt = cap.talker_kwargs["inputs_embeds"][0]
    rebuilt = embed_rows(m, rows, xvector, ref_code)
    if rebuilt.shape != prompt.shape:
        raise RuntimeError(f"layout length {tuple(rebuilt.shape)} != prompt {tuple(prompt.shape)}")
    err = float((rebuilt - prompt).abs().max())
    if err > 1e-4:
        raise RuntimeError(f"prompt layout does not match the official prompt: {err}")
    tt = cap.talker_kwargs["trailing_text_hidden"][0]
    tre = embed_rows(m, [{"text": t, "codec": None} for t in trailing])
    terr = float((tre - tt).abs().max()) if tre.shape == tt.shape else float("inf")
    if terr > 1e-4:
        raise RuntimeError(f"trailing text mismatch {tuple(tt.shape)} {tuple(tre.shape)} {terr}")
    return prompt, tt, err, terr


class EncodeCapture:
    """Records the calls of speech_tokenizer.encode and speaker_encoder.forward (inputs and
    outputs) without changing them."""

    def __init__(self, tts):
        self.encode_calls = []
        self.spk_calls = []
        st = tts.model.speech_tokenizer
        orig_encode = st.encode
        cap = self

        def encode(audios, sr=None, return_dict=True):
            res = orig_encode(audios, sr=sr, return_dict=return_dict)
            a = audios if isinstance(audios, list) else [audios]
            cap.encode_calls.append(dict(inputs=[np.array(x, copy=True) for x in a], sr=sr,
                                         codes=[c.clone() for c in res.audio_codes]))
            return res

        st.encode = encode
        tts.model.speaker_encoder.register_forward_hook(
            lambda mod, inp, out: cap.spk_calls.append(dict(mel=inp[0].detach().clone(), xvec=out.detach().clone())))

    def reset(self):
        self.encode_calls = []
        self.spk_calls = []


def speaker_encoder_stages(model, mel, store: ArrayStore, prefix: str) -> dict:
    """Every stage of Qwen3TTSSpeakerEncoder.forward (M:373-393) on the official mel input."""
    import torch
    se = model.speaker_encoder
    info = {}
    with torch.no_grad():
        x = mel.float().transpose(1, 2)  # [1, 128, T]
        outs = []
        for i, blk in enumerate(se.blocks):
            x = blk(x)
            outs.append(x)
            info[f"block{i}_out"] = store.add(f"{prefix}/block{i}_out", x[0].numpy())
        b1 = se.blocks[1]
        h = b1.tdnn1(outs[0])
        info["block1_tdnn1_out"] = store.add(f"{prefix}/block1_tdnn1_out", h[0].numpy())
        h = b1.res2net_block(h)
        info["block1_res2net_out"] = store.add(f"{prefix}/block1_res2net_out", h[0].numpy())
        h = b1.tdnn2(h)
        info["block1_tdnn2_out"] = store.add(f"{prefix}/block1_tdnn2_out", h[0].numpy())
        h = b1.se_block(h)
        info["block1_se_out"] = store.add(f"{prefix}/block1_se_out", h[0].numpy())
        cat = torch.cat(outs[1:], dim=1)
        m = se.mfa(cat)
        info["mfa_out"] = store.add(f"{prefix}/mfa_out", m[0].numpy())
        p = se.asp(m)
        info["asp_out"] = store.add(f"{prefix}/asp_out", p[0, :, 0].numpy())
        # attention weights of the pooling (softmax over time), recomputed as in M:214-240
        asp = se.asp
        T = m.shape[-1]
        mean = m.mean(2, keepdim=True)
        std = torch.sqrt(((m - mean) ** 2).mean(2, keepdim=True).clamp(asp.eps))
        att = torch.cat([m, mean.expand(-1, -1, T), std.expand(-1, -1, T)], 1)
        att = torch.softmax(asp.conv(asp.tanh(asp.tdnn(att))), dim=2)
        info["asp_attention"] = store.add(f"{prefix}/asp_attention", att[0].numpy())
        xv = se.fc(p)[0, :, 0]
        info["xvector"] = store.add(f"{prefix}/xvector", xv.numpy())
        info["max_abs_diff_vs_forward"] = float((xv - se(mel.float())[0]).abs().max())
    return info


def codec_encoder_stages(codec_model, wav24: np.ndarray, store: ArrayStore, prefix: str,
                         official_codes) -> dict:
    """The codec encoder stage by stage with the official submodules, in the order of
    MimiModel._encode_frame (transformers/models/mimi/modeling_mimi.py:1442-1471) and
    Qwen3TTSTokenizerV2Model.encode (V2:961-991)."""
    import torch
    enc = codec_model.encoder
    info = {}
    n = wav24.shape[0]
    with torch.no_grad():
        x = torch.from_numpy(wav24)[None, None]
        h = x
        layers = []
        stride = 1
        for i, layer in enumerate(enc.encoder.layers):
            h = layer(h)
            kind = type(layer).__name__
            if isinstance(layer, torch.nn.ELU):
                continue
            if kind == "MimiConv1d":
                stride *= int(layer.conv.stride[0])
            rec = dict(index=i, kind=kind, shape=list(h.shape[1:]), samples_per_step=stride,
                       channel_sum=[float(v) for v in h[0].double().sum(-1)],
                       channel_sumsq=[float(v) for v in h[0].double().pow(2).sum(-1)])
            if h[0].numel() <= 16384:
                rec["array"] = store.add(f"{prefix}/seanet_layer{i}_out", h[0].numpy())
            else:
                steps = math.ceil(1920 / stride)  # the first 12.5 Hz frame's worth of input
                rec["array_first_steps"] = steps
                rec["array"] = store.add(f"{prefix}/seanet_layer{i}_out_first{steps}", h[0, :, :steps].numpy())
            layers.append(rec)
        info["seanet_layers"] = layers
        emb = h  # [1, hidden, T25]
        info["seanet_out"] = store.add(f"{prefix}/seanet_out", emb[0].numpy())
        tr = enc.encoder_transformer
        t = emb.transpose(1, 2)
        out_all = tr(t, return_dict=True, output_hidden_states=True)
        for li, hs in enumerate(out_all.hidden_states[1:]):
            info[f"transformer_layer{li}_out"] = store.add(f"{prefix}/transformer_layer{li}_out", hs[0].numpy())
        th = out_all.last_hidden_state
        info["transformer_out"] = store.add(f"{prefix}/transformer_out", th[0].numpy())
        # the official code ignores config.sliding_window in this transformer (plain causal mask):
        saved = enc.config.sliding_window
        enc.config.sliding_window = 4
        th4 = tr(t, return_dict=True).last_hidden_state
        enc.config.sliding_window = saved
        info["sliding_window_ignored"] = bool(torch.equal(th4, th))
        ds = enc.downsample(th.transpose(1, 2))
        info["downsample_out"] = store.add(f"{prefix}/downsample_out", ds[0].numpy())
        q = enc.quantizer
        all_codes = []
        rvq_info = {}
        for rvq_name, short in (("semantic_residual_vector_quantizer", "semantic"),
                                ("acoustic_residual_vector_quantizer", "acoustic")):
            rvq = getattr(q, rvq_name)
            residual = rvq.input_proj(ds)
            rvq_info[short] = dict(input_proj_out=store.add(f"{prefix}/{short}_input_proj_out", residual[0].numpy()),
                                   layers=[])
            for li, layer in enumerate(rvq.layers):
                r = residual[0].T  # [T, D]
                d = torch.cdist(r[None].float(), layer.codebook.embed[None].float(), p=2)[0]
                sd, si = torch.sort(d, dim=-1, stable=True)
                idx = layer.encode(residual)[0]
                if not torch.equal(idx, si[:, 0]):
                    raise RuntimeError("argmin mismatch")
                gap = (sd[:, 1] - sd[:, 0])
                rvq_info[short]["layers"].append(dict(
                    min_distance_gap=float(gap.min()), min_relative_gap=float((gap / sd[:, 1].clamp(min=1e-12)).min()),
                    residual_rms=float(r.pow(2).mean().sqrt()), distinct_codes=int(len(set(idx.tolist())))))
                if li < 3:
                    rvq_info[short]["layers"][-1]["residual_in"] = store.add(
                        f"{prefix}/{short}_layer{li}_residual_in", residual[0].numpy())
                all_codes.append(idx)
                residual = residual - layer.decode(idx[None])
        codes_all = torch.stack(all_codes, 0)  # [num_quantizers, T]
        mimi_codes = enc.encode(x, return_dict=True).audio_codes[0]  # [num_quantizers, T]
        if not torch.equal(mimi_codes, codes_all):
            raise RuntimeError("stage-by-stage RVQ != MimiModel.encode")
        info["rvq"] = rvq_info
        info["codes_all_quantizers"] = store.add(f"{prefix}/codes_all_quantizers", codes_all.numpy(), dtype="i32")
        kept = codes_all[:16].T  # [T, 16], what Qwen3TTSTokenizerV2Model.encode returns
        n_frames_cut = -(-n // 1920)
        kept = kept[:n_frames_cut]
        if not torch.equal(kept, official_codes):
            raise RuntimeError("stage-by-stage codes != official speech_tokenizer.encode codes")
        info["codes"] = kept.tolist()
        info["n_samples"] = int(n)
        info["n_frames_25hz"] = int(emb.shape[-1])
        info["n_frames"] = int(kept.shape[0])
        info["n_frames_formula"] = "ceil(n_samples / 1920)"
        info["min_relative_distance_gap_kept"] = min(
            [l["min_relative_gap"] for l in rvq_info["semantic"]["layers"][:1]] +
            [l["min_relative_gap"] for l in rvq_info["acoustic"]["layers"][:15]])
        info["min_distance_gap_kept"] = min(
            [l["min_distance_gap"] for l in rvq_info["semantic"]["layers"][:1]] +
            [l["min_distance_gap"] for l in rvq_info["acoustic"]["layers"][:15]])
    return info


VOICE_CASES = [
    # name, clip, x_vector_only_mode
    ("ref24k_icl", "ref_24k.wav", False),
    ("ref16k_icl", "ref_16k.wav", False),
    ("ref24k_xvec", "ref_24k.wav", True),
]

CLONE_CASES = [
    # ref text (20 fixture-BPE tokens) + text (7) + tts_eos = 28 rows < 1 + 30 codec rows: the
    # text side is padded with tts_pad and the trailing text is [tts_pad]
    dict(name="icl_short_text_streaming", voice="ref24k_icl", text="See you today.",
         language="English", non_streaming_mode=None),
    # 20 + 47 + 1 = 68 > 31: the first 31 text rows go with the codec rows, 37 trail
    dict(name="icl_long_text_streaming", voice="ref24k_icl",
         text="The quick brown fox jumps over the lazy dog. Don't stop believing; it's what we've got, "
              "and the weather is nice and the sky is blue.",
         language="English", non_streaming_mode=None),
    dict(name="icl_chinese_non_streaming", voice="ref24k_icl", text="你好，世界。今天天气很好。",
         language="Chinese", non_streaming_mode=True),
    # 30 reference + 22 generated frames: int(30 / 52 * 52 * 96) = 2879, one sample short of
    # 30 * 96 (the float cut of generate_voice_clone, I:626-629)
    dict(name="icl_16k_auto", voice="ref16k_icl", text="Hello world! This is a speech synthesis test.",
         language=None, non_streaming_mode=None, max_new_tokens=23),
    dict(name="xvec_english_streaming", voice="ref24k_xvec", text="Speech recognition in Rust is working today.",
         language="English", non_streaming_mode=None),
    dict(name="xvec_japanese_non_streaming", voice="ref24k_xvec", text="こんにちは、元気ですか？",
         language="Japanese", non_streaming_mode=True),
]

DESIGN_CASES = [
    dict(name="english_instruct", text="She said she would be here by noon.", language="English",
         instruct="A warm, low female voice, speaking slowly and calmly.", non_streaming_mode=None),
    dict(name="chinese_instruct_streaming", text="其实我真的有发现。", language="Chinese",
         instruct="体现撒娇稚嫩的萝莉女声，音调偏高。", non_streaming_mode=False),
    dict(name="auto_no_instruct", text="Hello world, don't stop!", language="Auto", instruct="",
         non_streaming_mode=None),
]


def run_base(ckpt: Path, out: Path, clips: dict) -> dict:
    import librosa
    import torch
    import transformers
    from qwen_tts import Qwen3TTSModel
    tts = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.float32)
    tts.model.eval()
    cap = Capture(tts)
    ecap = EncodeCapture(tts)
    store = ArrayStore()
    m = tts.model
    codec = m.speech_tokenizer.model
    doc_voices = {}
    items = {}

    # ---- reusable voices: create_voice_clone_prompt ------------------------------------------
    for vname, clip, xvec_only in VOICE_CASES:
        ecap.reset()
        log(f"  base: create_voice_clone_prompt {vname}")
        it = tts.create_voice_clone_prompt(ref_audio=str(out / clip), ref_text=REF_TEXT,
                                           x_vector_only_mode=xvec_only)
        assert len(it) == 1
        item = it[0]
        items[vname] = item
        audio, sr = load_ref_like_official(out / clip)
        enc_in = ecap.encode_calls[0]["inputs"][0]
        wav24_codec = enc_in if ecap.encode_calls[0]["sr"] == 24000 else \
            librosa.resample(y=enc_in.astype(np.float32), orig_sr=int(ecap.encode_calls[0]["sr"]), target_sr=24000)
        wav24_spk = audio if sr == 24000 else librosa.resample(y=audio.astype(np.float32), orig_sr=sr, target_sr=24000)
        mel = ecap.spk_calls[0]["mel"]
        v = dict(
            clip=clip, ref_text=REF_TEXT, x_vector_only_mode=item.x_vector_only_mode, icl_mode=item.icl_mode,
            item_ref_text=item.ref_text, ref_code_is_none=item.ref_code is None,
            loaded_sample_rate=sr, loaded_samples=int(audio.shape[0]),
            encode_call=dict(sr=ecap.encode_calls[0]["sr"], n_inputs=len(ecap.encode_calls[0]["inputs"])),
            resampled_24k_samples=int(wav24_spk.shape[0]),
            codec_and_speaker_inputs_identical=bool(np.array_equal(wav24_codec, wav24_spk)),
            mel_frames=int(mel.shape[1]),
        )
        arrays = {}
        if xvec_only:
            arrays["xvector"] = store.add(f"voice/{vname}/xvector", item.ref_spk_embedding.float().numpy())
            same = items["ref24k_icl"]
            v["xvector_equals_ref24k_icl_xvector"] = bool(torch.equal(same.ref_spk_embedding, item.ref_spk_embedding))
            v["codec_encode_still_called"] = len(ecap.encode_calls) == 1
            v["codec_codes_computed_then_dropped_equal_ref24k_icl"] = bool(
                torch.equal(ecap.encode_calls[0]["codes"][0], same.ref_code))
        else:
            arrays["xvector"] = store.add(f"voice/{vname}/xvector", item.ref_spk_embedding.float().numpy())
            arrays["ref_code"] = store.add(f"voice/{vname}/ref_code", item.ref_code.numpy(), dtype="i32")
            v["ref_code"] = item.ref_code.tolist()
            v["ref_code_shape"] = list(item.ref_code.shape)
            arrays["mel"] = store.add(f"voice/{vname}/mel", mel[0].float().numpy())
            if sr != 24000:
                arrays["resampled_24k"] = store.add(f"voice/{vname}/resampled_24k", wav24_spk)
                v["resample"] = dict(call="librosa.resample(y, orig_sr, target_sr=24000) (res_type soxr_hq, fix=True)",
                                     orig_sr=sr, target_sr=24000, n_in=int(audio.shape[0]), n_out=int(wav24_spk.shape[0]),
                                     n_out_formula="ceil(n_in * 24000 / orig_sr)")
            else:
                v["waveform_sum"] = float(audio.astype(np.float64).sum())
                v["waveform_first8"] = [float(x) for x in audio[:8]]
            # the speaker encoder stage by stage, and the codec encoder stage by stage (24 kHz clip)
            if sr == 24000:
                v["speaker_encoder_stages"] = speaker_encoder_stages(m, mel, store, f"voice/{vname}/spk")
                v["codec_encoder_stages"] = codec_encoder_stages(codec, wav24_codec, store, f"voice/{vname}/codec",
                                                                 item.ref_code)
        v["arrays"] = arrays
        doc_voices[vname] = v

    # mel filterbank (librosa Slaney) as the official code builds it
    from librosa.filters import mel as librosa_mel_fn
    fb = librosa_mel_fn(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000).astype(np.float32)
    mel_fb = []
    for row in fb:
        nz = np.nonzero(row)[0]
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        mel_fb.append(dict(first_bin=lo, values=[float(x) for x in row[lo:hi]]))

    # the codec encoder alone through the public tokenizer API, from the file path
    enc_alone = tts.model.speech_tokenizer.encode(str(out / "ref_24k.wav"))
    enc_alone_codes = enc_alone.audio_codes[0]
    codec_alone = dict(call="model.speech_tokenizer.encode('ref_24k.wav')", codes_shape=list(enc_alone_codes.shape),
                       equals_voice_ref_code=bool(torch.equal(enc_alone_codes, items["ref24k_icl"].ref_code)))
    enc16 = tts.model.speech_tokenizer.encode(str(out / "ref_16k.wav"))
    c16 = enc16.audio_codes[0]
    c24 = enc_alone_codes
    codec_alone["ref_16k"] = dict(codes_shape=list(c16.shape),
                                  equals_voice_ref_code=bool(torch.equal(c16, items["ref16k_icl"].ref_code)),
                                  codes_differing_from_24k=int((c16 != c24).sum()) if c16.shape == c24.shape else None,
                                  group0_codes_differing_from_24k=int((c16[:, 0] != c24[:, 0]).sum()) if c16.shape == c24.shape else None)

    # ---- generate_voice_clone ------------------------------------------------------------------
    cases = []
    for ci, case in enumerate(CLONE_CASES):
        log(f"  base: generate_voice_clone {case['name']}")
        cap.reset()
        ecap.reset()
        vname = case["voice"]
        clip, xvec_only = {n: (c, x) for n, c, x in VOICE_CASES}[vname]
        mnt = case.get("max_new_tokens", MAX_NEW_TOKENS["base"])
        kw = dict(text=case["text"], ref_audio=str(out / clip), ref_text=REF_TEXT, x_vector_only_mode=xvec_only,
                  do_sample=False, subtalker_dosample=False, max_new_tokens=mnt)
        if case["language"] is not None:
            kw["language"] = case["language"]
        if case["non_streaming_mode"] is not None:
            kw["non_streaming_mode"] = case["non_streaming_mode"]
        wavs, sr = tts.generate_voice_clone(**kw)
        text_lookups = [list(x) for x in cap.text_lookups]
        codec_lookups = [list(x) for x in cap.codec_lookups]
        gk = cap.gen_kwargs
        non_streaming = bool(gk["non_streaming_mode"])
        language = gk["languages"][0]
        input_ids = gk["input_ids"][0][0].tolist()
        ref_ids = None if gk["ref_ids"] is None or gk["ref_ids"][0] is None else gk["ref_ids"][0][0].tolist()
        vcp = gk["voice_clone_prompt"]
        item = items[vname]
        if not torch.equal(vcp["ref_spk_embedding"][0], item.ref_spk_embedding):
            raise RuntimeError("x-vector differs from create_voice_clone_prompt's")
        icl = bool(vcp["icl_mode"][0])
        ref_code = vcp["ref_code"][0]
        n_ref = 0 if ref_code is None else int(ref_code.shape[0])
        rows, codec_seq, language_id, trailing = expected_layout_clone(
            m.config, input_ids, ref_ids, n_ref, language, icl, non_streaming)
        prompt, tt, err, terr = _check_prompt(tts, cap, rows, trailing, vcp["ref_spk_embedding"][0], ref_code)
        name = f"clone{ci}"
        rec = _generation_record(tts, cap, store, name, wavs, sr)
        rec["arrays"]["prompt_embeds"] = store.add(f"{name}/prompt_embeds", prompt.float().numpy())
        rec["arrays"]["trailing_text_embeds"] = store.add(f"{name}/trailing_text_embeds", tt.float().numpy())
        # the decode of generate_voice_clone (I:612-631)
        dec_in = cap.decode_input[0]["audio_codes"]
        full_wav = np.asarray(cap.decode_output[0][0], dtype=np.float32)
        total_len = int(dec_in.shape[0])
        if ref_code is not None and icl:
            cut = int(n_ref / max(total_len, 1) * full_wav.shape[0])
            if not np.array_equal(full_wav[cut:], np.asarray(wavs[0])):
                raise RuntimeError("cut mismatch")
        else:
            cut = 0
        up = int(codec.config.decode_upsample_rate)
        # same output through the reusable prompt
        wavs2, _ = tts.generate_voice_clone(text=case["text"], language=kw.get("language"),
                                            voice_clone_prompt=[item],
                                            non_streaming_mode=kw.get("non_streaming_mode", False),
                                            do_sample=False, subtalker_dosample=False,
                                            max_new_tokens=mnt)
        codes2 = cap.gen_result[0][0].tolist()
        rec.update(
            name=case["name"], voice=vname, text=case["text"],
            language_arg=case["language"], language=language,
            non_streaming_mode_arg=case["non_streaming_mode"], non_streaming_mode=non_streaming,
            x_vector_only_mode=xvec_only, icl_mode=icl,
            max_new_tokens=mnt,
            input_ids=input_ids, text_ids=input_ids[3:-5], ref_ids=ref_ids,
            ref_text_ids=None if ref_ids is None else ref_ids[3:-2],
            n_ref_frames=n_ref, language_id=language_id, codec_prefix=codec_seq,
            prompt_layout=rows, trailing_text=trailing,
            prompt_layout_max_abs_err=err, trailing_text_max_abs_err=terr,
            official_text_embedding_lookups=text_lookups,
            official_codec_embedding_lookups=codec_lookups,
            decode=dict(codes_decoded=total_len, ref_frames_prepended=n_ref if icl else 0,
                        samples_decoded=int(full_wav.shape[0]), cut=cut,
                        cut_formula="int(ref_len / total_len * samples_decoded)" if icl else None,
                        cut_equals_ref_len_times_upsample=(cut == n_ref * up) if icl else None),
            same_through_voice_clone_prompt=(codes2 == rec["codes"] and
                                             np.array_equal(np.asarray(wavs2[0]), np.asarray(wavs[0]))),
        )
        cases.append(rec)

    # ---- BF16 load: what a user who loads with dtype=torch.bfloat16 gets ---------------------------
    log("  base: bf16 load")
    tts_bf = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.bfloat16)
    it_bf = tts_bf.create_voice_clone_prompt(ref_audio=str(out / "ref_24k.wav"), ref_text=REF_TEXT)[0]
    f32 = items["ref24k_icl"]
    bf16_doc = dict(
        note="Qwen3TTSModel.from_pretrained(dtype=torch.bfloat16): the speech tokenizer is loaded with the same "
             "dtype (M:1915-1919) and encode() casts the waveform to it (T:248); extract_speaker_embedding "
             "casts the mel to the model dtype (M:1953).",
        codec_dtype=str(tts_bf.model.speech_tokenizer.model.dtype),
        ref_code=it_bf.ref_code.tolist(),
        ref_codes_differing_from_f32=int((it_bf.ref_code != f32.ref_code).sum()),
        ref_group0_codes_differing_from_f32=int((it_bf.ref_code[:, 0] != f32.ref_code[:, 0]).sum()),
        xvector_dtype=str(it_bf.ref_spk_embedding.dtype),
        xvector_max_abs_diff_from_f32=float((it_bf.ref_spk_embedding.float() - f32.ref_spk_embedding).abs().max()),
        xvector_rms_f32=float(f32.ref_spk_embedding.pow(2).mean().sqrt()),
    )
    bf16_doc["arrays"] = {"xvector": store.add("bf16/ref24k_xvector", it_bf.ref_spk_embedding.float().numpy())}
    del tts_bf

    doc = dict(
        checkpoint="base", generated_by="xtask/python/qwen3_tts_clone_fixtures.py",
        versions=dict(torch=torch.__version__, transformers=transformers.__version__, qwen_tts="0.1.1",
                      numpy=np.__version__, librosa=librosa.__version__,
                      soxr=__import__("soxr").__version__),
        load=dict(entry="qwen_tts.Qwen3TTSModel.from_pretrained", dtype="float32", device="cpu",
                  torch_threads=torch.get_num_threads()),
        reference=clips,
        generate_call=dict(entry="Qwen3TTSModel.generate_voice_clone(text, language, ref_audio=<path>, ref_text, "
                                 "x_vector_only_mode, [non_streaming_mode], do_sample=False, subtalker_dosample=False, "
                                 "max_new_tokens)", max_new_tokens=f"{MAX_NEW_TOKENS['base']} unless the case says otherwise",
                           other_from_generation_config=dict(repetition_penalty=GENERATION_DEFAULTS["repetition_penalty"])),
        voices=doc_voices,
        mel=dict(call="mel_spectrogram(y, n_fft=1024, num_mels=128, sampling_rate=24000, hop_size=256, "
                      "win_size=1024, fmin=0, fmax=12000) (M:399-464, M:1943-1952)",
                 filterbank_note="librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000) "
                                 "(float32): Slaney mel scale, Slaney area norm; 128 rows over 513 FFT bins, each row "
                                 "stored as its first nonzero bin and the values from there to its last nonzero bin "
                                 "(all other bins are 0)",
                 filterbank=mel_fb),
        codec_encode_alone=codec_alone,
        cases=cases,
        bf16=bf16_doc,
        notes=[
            "voices.*: what create_voice_clone_prompt returns (the reusable voice: ref_code [T,16] int64, "
            "ref_spk_embedding [enc_dim], x_vector_only_mode, icl_mode, ref_text).",
            "voices.*.mel: [frames, 128] log-mel exactly as fed to the speaker encoder; "
            "speaker_encoder_stages: every block output [channels, frames] recomputed with the official modules.",
            "voices.ref24k_icl.codec_encoder_stages: the Mimi encoder stage by stage; SEANet layer outputs are "
            "stored whole when small, else their first steps (causal convs: a prefix of the output depends only on "
            "the prefix of the input), with per-channel sums over the whole output.",
            "cases.*.prompt_layout rows: text = token id (text_projection(text_embedding)) or tts_pad/tts_bos/tts_eos "
            "or null; codec = codec id (talker.model.codec_embedding), 'xvector' (the speaker embedding as is), "
            "{ref_frame: k} (sum of the 16 codebook embeddings of reference frame k), or null. Checked against "
            "the official talker input (prompt_layout_max_abs_err).",
            "margins: top1 - top2 of the scores each argmax saw (as in the CustomVoice fixtures).",
            "wav: what generate_voice_clone returns (for ICL: the decode of ref codes + generated codes, "
            "with the first `cut` samples dropped).",
        ],
    )
    doc["arrays_note"] = "offset in bytes into expected_base.bin; little-endian; f32 or i32; C order"
    doc["arrays"] = store.index
    (out / "expected_base.bin").write_bytes(store.buf.getvalue())
    (out / "expected_base.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return doc


def run_design(ckpt: Path, out: Path) -> dict:
    import torch
    import transformers
    from qwen_tts import Qwen3TTSModel
    tts = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.float32)
    tts.model.eval()
    cap = Capture(tts)
    store = ArrayStore()
    m = tts.model
    cases = []
    for ci, case in enumerate(DESIGN_CASES):
        log(f"  voice_design: {case['name']}")
        cap.reset()
        kw = dict(text=case["text"], instruct=case["instruct"], language=case["language"],
                  do_sample=False, subtalker_dosample=False, max_new_tokens=MAX_NEW_TOKENS["voice_design"])
        if case["non_streaming_mode"] is not None:
            kw["non_streaming_mode"] = case["non_streaming_mode"]
        wavs, sr = tts.generate_voice_design(**kw)
        text_lookups = [list(x) for x in cap.text_lookups]
        codec_lookups = [list(x) for x in cap.codec_lookups]
        gk = cap.gen_kwargs
        non_streaming = bool(gk["non_streaming_mode"])
        input_ids = gk["input_ids"][0][0].tolist()
        instruct_ids = gk["instruct_ids"][0]
        instruct_ids = None if instruct_ids is None else instruct_ids[0].tolist()
        rows, codec_seq, language_id, trailing = fx.expected_layout(
            m.config, input_ids, instruct_ids, case["language"], None, non_streaming)
        prompt, tt, err, terr = _check_prompt(tts, cap, rows, trailing)
        name = f"design{ci}"
        rec = _generation_record(tts, cap, store, name, wavs, sr)
        rec["arrays"]["prompt_embeds"] = store.add(f"{name}/prompt_embeds", prompt.float().numpy())
        rec["arrays"]["trailing_text_embeds"] = store.add(f"{name}/trailing_text_embeds", tt.float().numpy())
        rec.update(
            name=case["name"], text=case["text"], instruct=case["instruct"], language=case["language"],
            non_streaming_mode_arg=case["non_streaming_mode"], non_streaming_mode=non_streaming,
            max_new_tokens=MAX_NEW_TOKENS["voice_design"],
            input_ids=input_ids, text_ids=input_ids[3:-5], instruct_ids=instruct_ids,
            language_id=language_id, codec_prefix=codec_seq, prompt_layout=rows, trailing_text=trailing,
            prompt_layout_max_abs_err=err, trailing_text_max_abs_err=terr,
            official_text_embedding_lookups=text_lookups, official_codec_embedding_lookups=codec_lookups,
        )
        cases.append(rec)
    doc = dict(
        checkpoint="voice_design", generated_by="xtask/python/qwen3_tts_clone_fixtures.py",
        versions=dict(torch=torch.__version__, transformers=transformers.__version__, qwen_tts="0.1.1",
                      numpy=np.__version__),
        load=dict(entry="qwen_tts.Qwen3TTSModel.from_pretrained", dtype="float32", device="cpu",
                  torch_threads=torch.get_num_threads()),
        generate_call=dict(entry="Qwen3TTSModel.generate_voice_design(text, instruct, language, "
                                 "[non_streaming_mode], do_sample=False, subtalker_dosample=False, max_new_tokens)",
                           max_new_tokens=MAX_NEW_TOKENS["voice_design"],
                           other_from_generation_config=dict(repetition_penalty=GENERATION_DEFAULTS["repetition_penalty"])),
        cases=cases,
        notes=[
            "prompt_layout as in the CustomVoice fixtures (qwen3_tts/expected_*.json), without a speaker row: "
            "the instruction turn '<|im_start|>user\\n{instruct}<|im_end|>\\n' is embedded whole (text rows, no "
            "codec part) before the role; an empty instruct gives no instruction rows.",
        ],
    )
    doc["arrays_note"] = "offset in bytes into expected_voice_design.bin; little-endian; f32 or i32; C order"
    doc["arrays"] = store.index
    (out / "expected_voice_design.bin").write_bytes(store.buf.getvalue())
    (out / "expected_voice_design.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n",
                                                    encoding="utf-8")
    return doc


# =======================================================================================
# Tensor listing (fixture vs real sizes)
# =======================================================================================

def list_tensors() -> str:
    import torch
    from transformers import MimiConfig
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSSpeakerEncoder
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Encoder

    def shapes(mod, prefix):
        sd = mod.state_dict()
        return {prefix + k: (tuple(v.shape), str(v.dtype).replace("torch.", "")) for k, v in sd.items()}

    with torch.device("meta"):
        spk_small = shapes(Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(**SPEAKER_CFG)), "speaker_encoder.")
        spk_17 = shapes(Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(enc_dim=2048)), "speaker_encoder.")
        spk_06 = shapes(Qwen3TTSSpeakerEncoder(Qwen3TTSSpeakerEncoderConfig(enc_dim=1024)), "speaker_encoder.")
        enc_small = shapes(Qwen3TTSTokenizerV2Encoder(MimiConfig(**ENCODER_CFG)), "encoder.")
        enc_real = shapes(Qwen3TTSTokenizerV2Encoder(MimiConfig(**REAL_ENCODER_CFG)), "encoder.")
    lines = ["| tensor | fixture | real 1.7B Base | real 0.6B Base |", "| --- | --- | --- | --- |"]
    for k in spk_17:
        lines.append(f"| {k} | {list(spk_small[k][0])} | {list(spk_17[k][0])} | {list(spk_06[k][0])} |")
    n17 = sum(int(np.prod(s)) for s, _ in spk_17.values())
    lines.append(f"\nspeaker encoder parameters: fixture {sum(int(np.prod(s)) for s, _ in spk_small.values()):,}, "
                 f"1.7B {n17:,} ({n17 * 2:,} B in BF16), 0.6B {sum(int(np.prod(s)) for s, _ in spk_06.values()):,}\n")
    lines += ["| tensor (speech_tokenizer/model.safetensors, F32) | fixture | real | dtype |", "| --- | --- | --- | --- |"]
    keys = list(enc_real)
    for k in keys:
        lines.append(f"| {k} | {list(enc_small[k][0]) if k in enc_small else '-'} | {list(enc_real[k][0])} | {enc_real[k][1]} |")
    extra = [k for k in enc_small if k not in enc_real]
    for k in extra:
        lines.append(f"| {k} | {list(enc_small[k][0])} | - | {enc_small[k][1]} |")
    nr = sum(int(np.prod(s)) for s, _ in enc_real.values())
    lines.append(f"\ncodec encoder tensors: {len(enc_real)} (real), {nr:,} values ({nr * 4:,} B in F32)")
    return "\n".join(lines)


# =======================================================================================
# README and main
# =======================================================================================

def write_readme(out: Path, summary: dict) -> None:
    rows = file_listing(out)
    total = sum(r[1] for r in rows if r[0] != "README.md")
    lines = [
        "# Qwen3-TTS-12Hz voice clone (Base) and voice design fixtures (random weights, official code)",
        "",
        "Generated by `xtask/python/qwen3_tts_clone_fixtures.py` (do not edit by hand). Reduced-size",
        "checkpoints of the real architecture with deterministic RANDOM weights, built and saved with the",
        "official `qwen-tts==0.1.1` classes (Apache-2.0) in the release folder layout, loaded back with",
        "`qwen_tts.Qwen3TTSModel.from_pretrained(dtype=float32)` and run greedily",
        "(`do_sample=False, subtalker_dosample=False`) through `create_voice_clone_prompt`,",
        "`generate_voice_clone` and `generate_voice_design`.",
        "",
        "Regenerate (deterministic, about a minute on one core; reuses the committed ref_*.wav; environment in",
        "xtask/python/qwen3_tts_requirements.txt):",
        "",
        "    nice /work/venvs/qwen3/bin/python xtask/python/qwen3_tts_clone_fixtures.py --out engine/tests/fixtures/qwen3_tts_clone",
        "",
        "Add `--new-clips` to synthesise the reference clips again with espeak-ng (needs `espeak-ng`).",
        "",
        "| checkpoint | tts_model_type | talker (hidden/layers/heads/kv/head_dim) | code predictor | speaker encoder | codec |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in summary["checkpoints"].items():
        lines.append(f"| {name} | {s['type']} | {s['talker']} | {s['cp']} | {s['spk']} | {s['codec']} |")
    r = summary["reference"]
    lines += [
        "",
        f"Reference clip: \"{r['text']}\" (the transcript, passed as ref_text everywhere): {r['source']}.",
        f"`ref_24k.wav`: {r['ref_24k.wav']['samples']} samples at 24 kHz ({r['ref_24k.wav']['seconds']} s, "
        f"{r['ref_24k.wav']['bytes']:,} B); `ref_16k.wav`: {r['ref_16k.wav']['samples']} samples at 16 kHz "
        f"({r['ref_16k.wav']['seconds']} s, {r['ref_16k.wav']['bytes']:,} B); 16-bit PCM mono.",
        "",
        "`expected_<checkpoint>.json` documents every field; arrays are in `expected_<checkpoint>.bin`",
        "(`arrays`: name -> byte offset, dtype f32/i32 little-endian, shape). The text tokenizer is the",
        "fixture BPE of `../qwen3_tts` (same files).",
        "",
        "What is recorded:",
        "",
        "- `expected_base.json` `voices`: `create_voice_clone_prompt` on `ref_24k.wav` (ICL), `ref_16k.wav` (ICL)",
        "  and `ref_24k.wav` (x-vector only): the reusable voice (x-vector, `ref_code` [30, 16], ref text, mode",
        "  flags), the log-mel the speaker encoder saw [223, 128], for the 16 kHz clip the official 24 kHz",
        "  resampling (librosa `soxr_hq`) that the speaker encoder and the codec both saw; for the 24 kHz clip",
        "  every ECAPA-TDNN stage (`speaker_encoder_stages`) and every codec-encoder stage (`codec_encoder_stages`:",
        "  SEANet layers, transformer layers, downsample, RVQ input projections, residuals, per-layer",
        "  nearest/second-nearest distance gaps, all 18 quantizers' codes); `mel.filterbank` (librosa Slaney);",
        "  `codec_encode_alone` (`speech_tokenizer.encode(path)`); `bf16` (the same voice with a BF16 load).",
        "- `expected_base.json` `cases`: `generate_voice_clone` (ICL streaming with short and long text, ICL",
        "  non-streaming, ICL from the 16 kHz clip with language Auto and 22 frames, x-vector only streaming",
        "  and non-streaming): prompt layout row by row (checked against the official talker input), prompt",
        "  and trailing-text embeddings, the first 3 talker logits rows, all codes, top-2 margins, the",
        "  waveform, the decode/cut of the reference part, and that the reusable prompt gives the same result.",
        "- `expected_voice_design.json` `cases`: `generate_voice_design` with an English instruction",
        "  (non-streaming), a Chinese one (streaming text) and none (empty instruct, language Auto).",
        "",
        f"Margins (greedy, top1 - top2): talker >= {summary['margins']['talker']:.3f}, code predictor >= "
        f"{summary['margins']['cp']:.4f} (relative >= {summary['margins']['cp_rel']:.1e}); codec encoder",
        f"nearest-codeword distance gap >= {summary['margins']['codec_gap']:.2e} (relative "
        f"{summary['margins']['codec_gap_rel']:.1e}) over the 16 kept quantizers.",
        "",
        f"Versions: {json.dumps(summary['versions'])}",
        "",
        f"Total size (without this README): {total:,d} bytes",
        "",
        "| file | bytes | sha256 |",
        "| --- | ---: | --- |",
    ]
    for path, size, sha in rows:
        if path == "README.md":
            continue
        lines.append(f"| {path} | {size:,d} | {sha[:16]} |")
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture directory (default: %(default)s)")
    ap.add_argument("--new-clips", action="store_true", help="synthesise ref_*.wav again with espeak-ng")
    ap.add_argument("--list-tensors", action="store_true", help="print the tensor tables and exit")
    ap.add_argument("--seed", action="append", default=[], metavar="NAME=SEED",
                    help="override a checkpoint's weight seed (for the seed search), e.g. base=302")
    ap.add_argument("--only", choices=["base", "voice_design"], help="seed search: build and run one checkpoint")
    args = ap.parse_args()

    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    if args.list_tensors:
        print(list_tensors())
        return 0

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    keep = {}
    if not args.new_clips:
        for f in ("ref_24k.wav", "ref_16k.wav"):
            if (out / f).exists():
                keep[f] = (out / f).read_bytes()
    for p in list(out.iterdir()):  # idempotent: everything here is generated
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    t0 = time.time()
    clips = make_reference_clips(out, keep)
    wav24, sr24 = load_ref_like_official(out / "ref_24k.wav")
    assert sr24 == 24000

    log("training the fixture tokenizer")
    tokd = build_fixture_tokenizer()
    tmp = Path(tempfile.mkdtemp())
    write_tokenizer_files(tokd, tmp)
    tok_files = {f: (tmp / f).read_bytes() for f in ("vocab.json", "merges.txt", "tokenizer_config.json")}
    shutil.rmtree(tmp)

    summary = dict(checkpoints={}, reference=clips,
                   versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                                 qwen_tts="0.1.1", python=sys.version.split()[0]))
    docs = {}
    for name in ("base", "voice_design"):
        if args.only and name != args.only:
            continue
        cfgs = clone_configs(name, tokd)
        for ov in args.seed:
            k, v = ov.split("=")
            if k == name:
                cfgs["seed"] = int(v)
        log(f"building {name} (seed {cfgs['seed']})")
        info = save_clone_checkpoint(cfgs, tok_files, out / name, wav24)
        t = cfgs["top"]["talker_config"]
        c = t["code_predictor_config"]
        s = cfgs["top"]["speaker_encoder_config"]
        e = cfgs["codec"]["encoder_config"]
        summary["checkpoints"][name] = dict(
            type=cfgs["top"]["tts_model_type"],
            talker=f"{t['hidden_size']}/{t['num_hidden_layers']}/{t['num_attention_heads']}/{t['num_key_value_heads']}/{t['head_dim']}",
            cp=f"{c['hidden_size']}/{c['num_hidden_layers']}/{c['num_attention_heads']}/{c['num_key_value_heads']}/{c['head_dim']}",
            spk=(f"channels {s['enc_channels']}, attention {s['enc_attention_channels']}, SE {s['enc_se_channels']}, "
                 f"res2net {s['enc_res2net_scale']}, enc_dim {s['enc_dim']}") if name == "base" else "none",
            codec=(f"encoder: filters {e['num_filters']}, hidden {e['hidden_size']}, {e['num_hidden_layers']} layers, "
                   f"{e['num_quantizers']} x {e['codebook_size']} x {e['codebook_dim']} (16 kept); decoder: "
                   f"{cfgs['codec']['decode_upsample_rate']} samples/frame"),
            info=info)
        log(f"running the official inference on {name}")
        docs[name] = run_base(out / name, out, clips) if name == "base" else run_design(out / name, out)
    if args.only:
        for c in docs[args.only]["cases"]:
            print(f"{args.only}/{c['name']}: min margin talker={c['min_margin']['talker_group0']:.4f} "
                  f"cp={c['min_margin']['code_predictor']:.4f} (rel {c['min_rel_margin']['code_predictor']:.1e})")
        return 0
    allc = [c for d in docs.values() for c in d["cases"]]
    ce0 = docs["base"]["voices"]["ref24k_icl"]["codec_encoder_stages"]
    summary["margins"] = dict(talker=min(c["min_margin"]["talker_group0"] for c in allc),
                              cp=min(c["min_margin"]["code_predictor"] for c in allc),
                              cp_rel=min(c["min_rel_margin"]["code_predictor"] for c in allc),
                              codec_gap=ce0["min_distance_gap_kept"],
                              codec_gap_rel=ce0["min_relative_distance_gap_kept"])
    write_readme(out, summary)
    total = 0
    for path, size, _ in file_listing(out):
        total += size
        print(f"{size:>12,d}  {out / path}")
    print(f"{total:>12,d}  total   ({time.time() - t0:.0f} s)")
    for name, d in docs.items():
        for c in d["cases"]:
            print(f"{name}/{c['name']}: frames={c['n_frames']} eos={c['stopped_by_eos']} "
                  f"min margin talker={c['min_margin']['talker_group0']:.4f} (rel {c['min_rel_margin']['talker_group0']:.1e}) "
                  f"cp={c['min_margin']['code_predictor']:.4f} (rel {c['min_rel_margin']['code_predictor']:.1e}) "
                  f"fragile={len(c['fragile_steps'])}")
    b = docs["base"]
    ce = b["voices"]["ref24k_icl"]["codec_encoder_stages"]
    print(f"codec encoder: {ce['n_frames']} frames, min distance gap (kept quantizers) {ce['min_distance_gap_kept']:.4g} "
          f"(relative {ce['min_relative_distance_gap_kept']:.3g}), "
          f"sliding window ignored: {ce['sliding_window_ignored']}")
    print(f"bf16: ref codes differing {b['bf16']['ref_codes_differing_from_f32']} "
          f"(group0 {b['bf16']['ref_group0_codes_differing_from_f32']}), xvector max diff "
          f"{b['bf16']['xvector_max_abs_diff_from_f32']:.3g}")
    for k, v in summary["checkpoints"].items():
        print(k, json.dumps(v["info"])[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
