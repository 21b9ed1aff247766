#!/usr/bin/env bash
# The linear kernels' row cut-overs on this GPU, measured in the 8B decode step: for each batch
# near a cut-over, the step with the kernel on each side of it (forced through the environment,
# launch/README.md) and with the backend's own choice (CudaBackendOptions::kByDevice, which
# follows the GPU's DRAM bandwidth); then the fusions and the decode-attention split measured on an
# H200 only, against the forms before them. One call on the GPU machine, ~2 minutes; ROUNDS (default 2)
# interleaved rounds; a markdown table in $OUT/cutovers.md. Pack: benchmarks/device_pack.sh
# llm_cuda_bench. Usage: benchmarks/cuda/cutovers_device.sh
set -uo pipefail
source "$(dirname "$0")/../device_prelude.sh"
source "$(dirname "$0")/step_variants.sh"
# name | quantization | batches | environment forcing it ("-": the default)
variants=(
  "FP8 default|fp8|2,4,5,8,16,32,64|-"
  "FP8 GEMV 1-4, few-rows 5-8, warpgroup 9-32 (H100 rule)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=0 LLM_FP8_GEMV_MAX_ROWS=4 LLM_GEMM_FEW_ROWS=8 LLM_GEMM_FP8_WGMMA=32"
  "FP8 W8A8 GEMV 2-8, warpgroup 9-32 (H100 rule with the W8A8 GEMV)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=8 LLM_FP8_GEMV_MAX_ROWS=4 LLM_GEMM_FEW_ROWS=8 LLM_GEMM_FP8_WGMMA=32"
  "FP8 GEMV 1-4, few-rows 5-8, warpgroup 9-16 (H100, raw sums from 17)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=0 LLM_FP8_GEMV_MAX_ROWS=4 LLM_GEMM_FEW_ROWS=8 LLM_GEMM_FP8_WGMMA=16"
  "FP8 GEMV 1, W8A8 GEMV 2-8, warpgroup 9-16 (H200 rule, raw sums from 17)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=8 LLM_FP8_GEMV_MAX_ROWS=1 LLM_GEMM_FEW_ROWS=0 LLM_GEMM_FP8_WGMMA=16"
  "FP8 GEMV 1, warpgroup 2-16 (H200 without the W8A8 GEMV)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=0 LLM_FP8_GEMV_MAX_ROWS=1 LLM_GEMM_FEW_ROWS=0 LLM_GEMM_FP8_WGMMA=16"
  "FP8 GEMV 1, warpgroup 2-64 (H200, the rule before the raw sums)|fp8|2,4,5,8,16,32,64|LLM_FP8_W8A8_GEMV=0 LLM_FP8_GEMV_MAX_ROWS=1 LLM_GEMM_FEW_ROWS=0 LLM_GEMM_FP8_WGMMA=64"
  "FP8 warpgroup at 1 row|fp8|1|LLM_FP8_W8A8_GEMV=0 LLM_FP8_GEMV_MAX_ROWS=0 LLM_GEMM_FEW_ROWS=0"
  "FP8 default at 1 row|fp8|1|-"
  "int4 default (GEMV up to 32, warpgroup from 33)|int4|16,17,24,32,33|-"
  "int4 few-rows 17-32 (the old H100 rule)|int4|16,17,24,32,33|LLM_GEMM_FEW_ROWS_INT4=17,128"
  "int4 warpgroup from 17 (the old H200 rule)|int4|16,17,24,32,33|LLM_GEMM_W4A16_WGMMA=17,448"
  "int4 default at 9-16 rows (norm in the reordering kernel, one attention slice at 16)|int4|9,12,16|-"
  "int4 norm and reordering apart (before the twenty-seventh session)|int4|9,12,16|LLM_FUSE_REORDERED_NORM=0"
  "int4 two attention slices at 16 (the split rule before the twenty-seventh session)|int4|16|LLM_ATTENTION_SPLITS=2"
  "bf16 default at 16 (one attention slice)|none|16|-"
  "bf16 two attention slices at 16|none|16|LLM_ATTENTION_SPLITS=2"
  "FP8 + FP8 KV default (O transposed in decode attention)|fp8|32,128,256|-"
  "FP8 + FP8 KV, O untransposed (before the twenty-eighth session)|fp8|32,128,256|LLM_ATTENTION_FP8_OT=0"
  "int4 default at 17-32 rows (gate_up's norm in the reordering)|int4|17,24,32|-"
  "int4 norms apart at 9-32 rows|int4|17,24,32|LLM_FUSE_REORDERED_NORM=0"
)
StepVariantsTable "$OUT/cutovers.md" "${ROUNDS:-2}"
