#!/usr/bin/env bash
# halo against llama.cpp on the same GGUF files, same machine, same run,
# alternating rounds (read bandwidth drifts within minutes; see
# docs/quantization.md, "Speed"). Decode of one stream (tg), prefill of 512
# tokens (pp512), and many streams (llama-batched-bench against halo bench
# latency's batch sizes), each beside the machine's read bandwidth.
#
# usage: benchmarks/vs_llama_cpp.sh LLAMA_CPP_BUILD_DIR MODEL.gguf [MODEL.gguf ...]
#   env: THREADS (2), ROUNDS (2), HALO (build/bin/halo), DECODE (32), STREAMS (32)
#
# llama.cpp is built natively outside the repository (docs/quantization.md,
# "Speed" tells how: node-llama-cpp ships its source). GGUF files of a
# Hugging Face model: tools/make_gguf.py --outtype bf16, then llama-quantize.
set -euo pipefail
llama_build=${1:?usage: $0 LLAMA_CPP_BUILD_DIR MODEL.gguf...}
shift
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
decode=${DECODE:-32}
streams=${STREAMS:-32}
halo=${HALO:-$(dirname "$0")/../build/bin/halo}
bench="$llama_build/bin/llama-bench"
batched="$llama_build/bin/llama-batched-bench"
for f in "$halo" "$bench" "$batched"; do
  [[ -x "$f" ]] || { echo "vs_llama_cpp: $f not found or not executable" >&2; exit 2; }
done

for model in "$@"; do
  name=$(basename "$model" .gguf)
  for r in $(seq 1 "$rounds"); do
    echo "== $name round $r: halo (prefill 512, then decode of 1 stream; then $streams streams of 128 + $decode)"
    "$halo" bench latency --model "$model" --batch-sizes 1 --input-len 512 --output-len "$decode" \
      --threads "$threads" --roofline-budget 0.5 2>/dev/null | sed -n '/read bandwidth/p;/^ *1 |/p'
    "$halo" bench latency --model "$model" --batch-sizes "$streams" --input-len 128 --output-len "$decode" \
      --threads "$threads" --roofline-budget 0.5 2>/dev/null | sed -n "/^ *$streams |/p"
    echo "== $name round $r: llama.cpp (llama-bench: pp512, tg$decode)"
    "$bench" -m "$model" -t "$threads" -p 512 -n "$decode" -r 1 -o md 2>/dev/null | grep -E "^\|"
    echo "== $name round $r: llama.cpp (llama-batched-bench: 128 prompt + $decode tokens, $streams streams)"
    "$batched" -m "$model" -t "$threads" -c 8192 -b 2048 -ub 512 -npp 128 -ntg "$decode" -npl "$streams" 2>/dev/null |
      grep -E "^\|"
  done
done
