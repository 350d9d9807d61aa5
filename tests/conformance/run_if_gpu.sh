#!/bin/sh
# run_if_gpu.sh SUITE CUDA_PLUGIN: the documented command on the cuda plugin when a
# GPU is visible; exit 77 (ctest: skipped) with the reason otherwise.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU [0-9]"; then
  echo "conformance_cuda skipped: no GPU visible (nvidia-smi -L lists none)"
  exit 77
fi
exec "$1" --plugin "$2"
