// W8A8 GEMM on Hopper's warpgroup MMAs for decode batches: out[M, N] = (x[M, K] · W[N, K]ᵀ) x
// the weight's scale (per tensor or per channel) x the activation's (per tensor or per token)
// (+ bias), x and W in E4M3, float32 sums, out in bf16/fp16. Takes the same arguments as
// cuBLASLt's FP8 GEMM (fp8_gemm_args.h), for M up to kGemmFp8WgmmaMaxRows.
//
// At these M the linear is bound by reading W once, and cuBLASLt's FP8 GEMM reads the 8B decode
// shapes at 27-72% of the bandwidth (its tiles re-read W per M tile and leave SMs idle on narrow
// W). Here W's rows are the MMAs' 64-row A operand and the tokens their B operand (all M in one
// tile of 16-64), both staged by TMA with the 128-byte swizzle through a ring of stages that a
// producer warp keeps full; W is read exactly once, and the (128-row tile, 256-column step)
// iterations of the whole GEMM are split evenly over one block an SM (stream-K, stream_k.cuh:
// deterministic sums of tiles that straddle blocks).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/gemm/fp8_gemm_args.h"

namespace llm::cuda {

constexpr int kGemmFp8WgmmaMaxRows = 64;

// Whether the kernel takes `args`: 1 <= m <= kGemmFp8WgmmaMaxRows, k a multiple of 16, W's scales
// kScalar or kOuterVector, x's kScalar or kOuterVector, out bf16 or fp16, x, W and out 16-byte
// aligned, and a driver that encodes TMA tensor maps (else the caller keeps cuBLASLt).
bool GemmFp8WgmmaSupports(const Fp8GemmArgs& args);

// Device memory for straddling tiles' sums and counters (zero-filled once; the counters are zero
// again after every call; calls sharing it run in stream order). The few-rows GEMM's workspace
// (gemm_few_rows.h) is as large: one may serve both.
size_t GemmFp8WgmmaWorkspaceBytes(int num_sms);

struct GemmFp8WgmmaOptions {
  bool pdl = false;  // programmatic dependent launch: W's first stages load before the wait
  // Where a call's time goes (benchmarks): when set, [gridDim.x][4] device nanoseconds
  // (%globaltimer) a block: at entry, when its first stage has landed, after its last stage's
  // MMAs, at exit. Blocks = min(num_sms, 128-row tiles x 256-column steps).
  unsigned long long* block_times = nullptr;
};

absl::Status LaunchGemmFp8Wgmma(const Fp8GemmArgs& args, int num_sms, void* workspace, size_t workspace_bytes,
                                const GemmFp8WgmmaOptions& options, Stream stream);

}  // namespace llm::cuda
