#!/bin/bash
# Runs Whisper (f16 weights, so the encoder's products reach BLAS) on the CPU and on the
# GPU through audiocpp_gemm, then with the library's own kernel forced, and compares the
# transcripts. BIN holds audiocpp_cli, its libggml*.so and a libggml-cuda.so (or -hip)
# built with the route; AUDIOCPP_GEMM_STATS=1 makes the library print its call counters.
#
# usage: whisper_check.sh BIN MODEL.gguf CLIP.wav BACKEND
set -euo pipefail
bin=$1
model=$2
clip=$3
backend=${4:-cuda}
out=$(mktemp -d)
cli() { LD_LIBRARY_PATH="$bin" "$bin/audiocpp_cli" "$@"; }

cli --list-devices
cli --task asr --family whisper --model "$model" --audio "$clip" --backend cpu --text-out "$out/cpu.txt"
AUDIOCPP_GEMM_STATS=1 cli --task asr --family whisper --model "$model" --audio "$clip" \
    --backend "$backend" --text-out "$out/gpu.txt" 2>&1 | tee "$out/gpu.log"
AUDIOCPP_GEMM_STATS=1 AUDIOCPP_GEMM_FORCE_FALLBACK=1 cli --task asr --family whisper --model "$model" \
    --audio "$clip" --backend "$backend" --text-out "$out/kernel.txt" 2>&1 | tee "$out/kernel.log"
echo "== cpu:    $(cat "$out/cpu.txt")"
echo "== gpu:    $(cat "$out/gpu.txt")"
echo "== kernel: $(cat "$out/kernel.txt")"
grep -o 'audiocpp_gemm:.*' "$out/gpu.log" "$out/kernel.log"
if ! grep -q 'route_lt=[1-9]' "$out/gpu.log"; then
    echo "FAIL: no product reached the Lt library" >&2
    exit 1
fi
cmp "$out/cpu.txt" "$out/gpu.txt"
cmp "$out/cpu.txt" "$out/kernel.txt"
echo "OK: the same transcript on the CPU, through the Lt library and through the fallback kernel"
