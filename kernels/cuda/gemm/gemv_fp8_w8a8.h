// W8A8 GEMV for decode's few rows: out[M, N] = (x[M, K] · W[N, K]ᵀ) x the weight's scale (per
// tensor or per channel) x the activation's (per tensor or per token) (+ bias), x and W in E4M3,
// float32 sums, out in bf16/fp16: the arithmetic of the warpgroup GEMM and cuBLASLt's FP8 GEMM
// (fp8_gemm_args.h), for M up to kGemvFp8W8A8MaxRows.
//
// Why: at 2-8 rows a linear is bound by reading W once, and the kernels there either widen every
// E4M3 weight before multiplying (the W8A16 GEMVs and few-rows GEMM: bound by their instructions on
// fast memory) or stage W through TMA stages and sum straddling tiles across blocks (the warpgroup
// GEMM: a fixed cost of several us that small weights do not hide). Here each warp loads W straight
// into the B operand of mma.m16n8k32 E4M3 MMAs (16 bytes a lane from one weight row: eight rows a
// warp, 64 columns a load) with x's codes as the A operand (tokens = rows; 16 of them, M used), so
// 512 weight bytes cost a warp one load and two MMAs, no weight is converted, and there is no
// cross-block sum (a row group's K splits over the warps of one block). The MMAs' k order is
// permuted alike in A and B (a lane's 16 bytes are columns 16t..16t+15 of the 64), which a sum does
// not see. W's first loads are issued before the grid-dependency wait (only x and its scales come
// from the predecessor).
//
// Measured (benchmarks/RESULTS.md, twenty-sixth session, an H200): the 8B FP8 step at batch 2
// 3.6% faster than with the warpgroup GEMM, at 3-4 1.5%, at 5-8 level; at one row no faster than
// the W8A16 register GEMV (both stream at ~3.4 TB/s there: loads into registers, not instructions,
// set that pace), so one row keeps that GEMV and the ops it fuses; at 9-16 rows (two token tiles)
// 16% slower than the warpgroup GEMM. Two row groups a warp (x read once for 16 weight rows) gained
// nothing in the step.
#pragma once

#include "absl/status/status.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/fp8_gemm_args.h"

namespace llm::cuda {

constexpr int kGemvFp8W8A8MaxRows = 16;

// Whether the kernel takes `args`: 1 <= m <= kGemvFp8W8A8MaxRows, k a multiple of 64, W's scales
// kScalar or kOuterVector, x's kScalar or kOuterVector, out bf16 or fp16, x and W 16-byte aligned.
bool GemvFp8W8A8Supports(const Fp8GemmArgs& args);

struct GemvFp8W8A8Options {
  bool pdl = false;  // programmatic dependent launch: W's first loads before the wait
  int num_sms = 0;   // sizes the split of K (0: no split)
};

absl::Status LaunchGemvFp8W8A8(const Fp8GemmArgs& args, const GemvFp8W8A8Options& options, Stream stream);

}  // namespace llm::cuda
