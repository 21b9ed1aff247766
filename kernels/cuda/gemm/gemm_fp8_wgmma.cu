#include "kernels/cuda/gemm/gemm_fp8_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/gemm/stream_k.cuh"

namespace llm::cuda {
namespace {

constexpr int kBoxBytes = kTensorMapBoxBytes;  // a TMA box's row: one 128-byte swizzle span of K
constexpr int kBoxes = 2;       // boxes a stage: 256 columns of K
constexpr int kStepBytes = kBoxes * kBoxBytes;
constexpr int kMmaK = 32;                  // K columns an MMA
constexpr int kTileRows = 128;             // W rows a tile: two 64-row MMAs of one warpgroup
constexpr int kConsumers = 128;            // the warpgroup
constexpr int kThreads = kConsumers + 32;  // and the producer warp
constexpr int kSmemBudget = 200 << 10;
constexpr int kMaxSlotFloats = kTileRows * kGemmFp8WgmmaMaxRows;

// A stage holds kStepBytes columns of the tile's W rows and of x's kTokens rows, as two TMA boxes
// each (a box: the rows' 128 bytes, 128-byte swizzle; W's boxes first).
template <int kTokens>
struct WgmmaTile {
  static constexpr int kWBoxBytes = kTileRows * kBoxBytes;
  static constexpr int kXBoxBytes = kTokens * kBoxBytes;
  static constexpr int kWBytes = kBoxes * kWBoxBytes;
  static constexpr int kStageBytes = kWBytes + kBoxes * kXBoxBytes;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle's 1024-byte alignment");
  // Two stages a block in flight: enough for the bandwidth-latency product (~3 TB/s x ~2 us over
  // 132 SMs, ~45 KB; a stage is 36-48 KB), and the fewer bytes each block has queued, the more
  // evenly DRAM serves the blocks' equal shares. With the five that 200 KB held, every block's
  // first stage landed only after ~7 us (21 MB asked for at once) and the last block finished its
  // MMAs 4-5 us after the median one; two took the FP8 step at 9-32 rows down 3.5-4.8% on an H100
  // (three: 2.7-4.3%; benchmarks/RESULTS.md, sixteenth session).
  static constexpr int kStages = 2;
  static_assert(kStages * kStageBytes <= kSmemBudget, "the stages fit");
  static constexpr int kBarOffset = kStages * kStageBytes;  // full barriers, then empty ones
  static constexpr int kFlagOffset = kBarOffset + 2 * kStages * 8;
  // And room to align the base to 1024; a block has its SM to itself (stream_k.cuh).
  static constexpr int kSmemBytes = StreamKBlockSmemBytes(kFlagOffset + 16 + 1024);
  static constexpr int kAcc = kTokens / 2;                    // sums a thread holds a 64-row MMA
  static constexpr int kSlotFloats = kTileRows * kTokens;     // a straddling tile's sums
  static_assert(kSlotFloats <= kMaxSlotFloats, "the workspace's slots hold a tile's sums");
};

// Threads 0-127 (a warpgroup) take the MMAs, W rows 0-63 and 64-127 of the tile as two m64nKk32
// MMAs a 32-column slice sharing the x operand; thread 128 issues the TMA loads, each stage after
// the four consumer warps released it (empty barrier), which they do as soon as its MMAs are done
// (keeping them in flight over the next stage's wait held the stage longer and was slower on an
// H100). W's first stages are loaded before the dependency wait (W is no kernel's output), x's
// after.
template <typename T, int kTokens>
__global__ void __launch_bounds__(kThreads, 1)
    GemmFp8WgmmaKernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                       const float* __restrict__ w_scale, bool w_per_row, const float* __restrict__ x_scale,
                       bool x_per_token, const T* __restrict__ bias, T* __restrict__ out, int m, int n,
                       int steps, float* __restrict__ slots, unsigned* __restrict__ counters,
                       unsigned long long* __restrict__ block_times) {
  if (block_times != nullptr && threadIdx.x == 0) block_times[4 * blockIdx.x] = GlobalTimerNs();
  using C = WgmmaTile<kTokens>;
  constexpr int kStages = C::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SharedAddress(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
  uint64_t* empty = full + kStages;
  unsigned* last_flag = reinterpret_cast<unsigned*>(smem + C::kFlagOffset);
  const int tid = threadIdx.x;
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int total = tiles * steps, blocks = gridDim.x;
  const int begin = StreamKRangeBegin(blockIdx.x, total, blocks);
  const int count = StreamKRangeBegin(blockIdx.x + 1, total, blocks) - begin;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarrierInit(&full[s], 1);
      MbarrierInit(&empty[s], kConsumers / 32);
    }
    FenceMbarrierInit();
  }
  __syncthreads();

  if (tid >= kConsumers) {  // the producer warp: one thread copies
    if (tid != kConsumers) return;
    const uint64_t stream = L2EvictFirstPolicy(), keep = L2EvictLastPolicy();
    auto load_w = [&](int s, int it) {
      for (int b = 0; b < kBoxes; ++b)
        TensorTileToShared(smem + s * C::kStageBytes + b * C::kWBoxBytes, &w_map,
                           (it % steps) * kStepBytes + b * kBoxBytes, (it / steps) * kTileRows, &full[s], stream);
    };
    auto load_x = [&](int s, int it) {
      for (int b = 0; b < kBoxes; ++b)
        TensorTileToShared(smem + s * C::kStageBytes + C::kWBytes + b * C::kXBoxBytes, &x_map,
                           (it % steps) * kStepBytes + b * kBoxBytes, 0, &full[s], keep);
    };
    const int pre = count < kStages ? count : kStages;
    for (int s = 0; s < pre; ++s) {
      MbarrierArriveExpectTx(&full[s], C::kStageBytes);
      load_w(s, begin + s);
    }
    GridDependencyWait();  // x is the previous kernel's output
    for (int s = 0; s < pre; ++s) load_x(s, begin + s);
    for (int local = pre; local < count; ++local) {
      const int s = local % kStages;
      MbarrierWait(&empty[s], ((local / kStages) - 1) & 1);
      MbarrierArriveExpectTx(&full[s], C::kStageBytes);
      load_w(s, begin + local);
      load_x(s, begin + local);
    }
    return;  // the producer's exit counts as its part of the launch trigger
  }

  GridDependencyWait();  // the scales, the output and the workspace
  const int warp = tid >> 5, lane = tid & 31;
  // Each box's sums (MMA accumulators: 128 columns, 4 MMAs) and the segment's float32 totals: the
  // tensor cores sum E4M3 products with fewer bits than float32, so every 128 columns start afresh
  // and are added to the totals on the CUDA cores (DeepSeek-V3's promotion; what cuBLASLt does
  // unless told to be fast: with 256 columns a promotion, fp16 outputs were 15% further from the
  // float32 sums than cuBLASLt's on an H100).
  float part[kBoxes][2][C::kAcc], acc[2][C::kAcc];
  auto zero = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < C::kAcc; ++r) acc[h][r] = 0.0f;
  };
  auto fence_sums = [&] {
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      WgmmaFenceOperands(part[b][0]);
      WgmmaFenceOperands(part[b][1]);
    }
  };
  // The scales (and bias) a thread's sums take, loaded ahead of the stores: x's once, W's when a
  // tile's first step is seen, so that no load's latency sits between the last MMA and the
  // stores. xs[j]: token 8 (j / 2) + 2 (lane % 4) + j % 2; ws[h][i], wb[h][i]: W row 64 h + 16 warp
  // + lane / 4 + 8 i of the tile.
  float xs[C::kAcc / 2], ws[2][2], wb[2][2];
#pragma unroll
  for (int j = 0; j < C::kAcc / 2; ++j) {
    const int token = 8 * (j >> 1) + 2 * (lane & 3) + (j & 1);
    xs[j] = token < m ? __ldg(x_scale + (x_per_token ? token : 0)) : 0.0f;
  }
  auto load_row_scales = [&](int tile) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = tile * kTileRows + 64 * h + 16 * warp + (lane >> 2) + 8 * i;
        ws[h][i] = row < n ? __ldg(w_scale + (w_per_row ? row : 0)) : 0.0f;
        wb[h][i] = row < n && bias != nullptr ? ToFloat(bias[row]) : 0.0f;
      }
  };
  // acc[h][4 j + e]: W row 64 h + 16 warp + lane / 4 (+ 8 for e >= 2) of the tile, token 8 j +
  // 2 (lane % 4) + e % 2 (wgmma.cuh).
  auto store = [&](int tile) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < C::kAcc; ++r) {
        const int row = tile * kTileRows + 64 * h + 16 * warp + (lane >> 2) + ((r & 2) ? 8 : 0);
        const int token = 8 * (r >> 2) + 2 * (lane & 3) + (r & 1);
        if (row < n && token < m)
          out[static_cast<int64_t>(token) * n + row] =
              FromFloat<T>(acc[h][r] * ws[h][(r >> 1) & 1] * xs[2 * (r >> 2) + (r & 1)] + wb[h][(r >> 1) & 1]);
      }
  };
  // The tile's sums over steps [from, to) are done: write them, or, for a tile that
  // straddles blocks, store them in this block's slot; the last contributor adds the slots in
  // block order and writes the tile (stream_k.cuh).
  auto finish = [&](int tile, int from, int to) {
    if (from == 0 && to == steps) return store(tile);
    if (StreamKSumStraddle<kConsumers, 1>(reinterpret_cast<float(&)[2 * C::kAcc]>(acc),
                                          StreamKStraddle(tile, steps, total, blocks), slots, C::kSlotFloats,
                                          counters, last_flag, tid))
      store(tile);
  };

  zero();
  const uint32_t base = SharedAddress(smem);
  int tile = begin / steps, step = begin % steps, seg_from = step;
  load_row_scales(tile);
  for (int local = 0; local < count; ++local) {
    const int s = local % kStages;
    if (step == 0 && local > 0) load_row_scales(tile);
    MbarrierWait(&full[s], (local / kStages) & 1);
    if (block_times != nullptr && tid == 0 && local == 0) block_times[4 * blockIdx.x + 1] = GlobalTimerNs();
    // All of W this block reads has landed: the next kernel may launch and take its place beside
    // it (its launch and prologue overlap this block's last MMAs, sums and stores; it still waits
    // for the whole grid before reading the output).
    if (local == count - 1) AllowDependentLaunch();
    const uint32_t w_addr = base + s * C::kStageBytes, x_addr = w_addr + C::kWBytes;
    fence_sums();
    WgmmaFence();
#pragma unroll
    for (int b = 0; b < kBoxes; ++b)
#pragma unroll
      for (int kk = 0; kk < kBoxBytes / kMmaK; ++kk) {
        const uint32_t w_at = w_addr + b * C::kWBoxBytes + kk * kMmaK;
        const uint64_t x_desc = WgmmaDescSwizzle128(x_addr + b * C::kXBoxBytes + kk * kMmaK);
        WgmmaFp8<kTokens>::Run(part[b][0], WgmmaDescSwizzle128(w_at), x_desc, kk > 0);
        WgmmaFp8<kTokens>::Run(part[b][1], WgmmaDescSwizzle128(w_at + 64 * kBoxBytes), x_desc, kk > 0);
      }
    WgmmaCommit();
    WgmmaWait<0>();
    fence_sums();
    __syncwarp();
    if (lane == 0) MbarrierArrive(&empty[s]);  // the stage's operands are read
#pragma unroll
    for (int b = 0; b < kBoxes; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < C::kAcc; ++r) acc[h][r] += part[b][h][r];
    if (block_times != nullptr && tid == 0 && local == count - 1) block_times[4 * blockIdx.x + 2] = GlobalTimerNs();
    if (step == steps - 1 || local == count - 1) {
      finish(tile, seg_from, step + 1);
      zero();
      seg_from = 0;
    }
    if (++step == steps) step = 0, ++tile;
  }
  if (block_times != nullptr && tid == 0) block_times[4 * blockIdx.x + 3] = GlobalTimerNs();
}

template <typename T, int kTokens>
absl::Status LaunchTyped(const Fp8GemmArgs& a, int num_sms, void* workspace, size_t workspace_bytes,
                         const GemmFp8WgmmaOptions& options, Stream stream) {
  using C = WgmmaTile<kTokens>;
  auto kernel = GemmFp8WgmmaKernel<T, kTokens>;
  CUtensorMap w_map, x_map;
  RETURN_IF_ERROR(EncodeSwizzledRows(&w_map, a.w, a.n, a.k, kTileRows, "GemmFp8Wgmma"));
  RETURN_IF_ERROR(EncodeSwizzledRows(&x_map, a.x, a.m, a.k, kTokens, "GemmFp8Wgmma"));
  const int steps = static_cast<int>((a.k + kStepBytes - 1) / kStepBytes);
  const int total = static_cast<int>((a.n + kTileRows - 1) / kTileRows) * steps;
  const int blocks = std::min(total, num_sms);
  const StreamKSlots sums = StreamKSlotsIn(workspace, workspace_bytes, num_sms, blocks, C::kSlotFloats);
  if (sums.slots == nullptr) return absl::InternalError("GemmFp8Wgmma: workspace too small");
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, C::kSmemBytes));
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(blocks), dim3(kThreads), C::kSmemBytes, stream, options.pdl,
                                    w_map, x_map, a.w_scale, a.w_mode == Fp8ScaleMode::kOuterVector,
                                    a.x_scale, a.x_mode == Fp8ScaleMode::kOuterVector,
                                    static_cast<const T*>(a.bias), static_cast<T*>(a.out),
                                    static_cast<int>(a.m), static_cast<int>(a.n), steps,
                                    sums.slots, sums.counters, options.block_times));
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchRows(const Fp8GemmArgs& a, int num_sms, void* workspace, size_t workspace_bytes,
                        const GemmFp8WgmmaOptions& options, Stream stream) {
  if (a.m <= 16) return LaunchTyped<T, 16>(a, num_sms, workspace, workspace_bytes, options, stream);
  if (a.m <= 32) return LaunchTyped<T, 32>(a, num_sms, workspace, workspace_bytes, options, stream);
  return LaunchTyped<T, 64>(a, num_sms, workspace, workspace_bytes, options, stream);
}

}  // namespace

bool GemmFp8WgmmaSupports(const Fp8GemmArgs& a) {
  return a.m >= 1 && a.m <= kGemmFp8WgmmaMaxRows && a.n >= 1 && a.k >= 16 && a.k % 16 == 0 &&
         (a.n + 127) / 128 * ((a.k + 127) / 128) < (int64_t{1} << 30) && a.n < (int64_t{1} << 31) &&
         (a.out_dtype == DType::kBF16 || a.out_dtype == DType::kF16) && ScaleModeIsTensorOrRow(a.w_mode) &&
         ScaleModeIsTensorOrRow(a.x_mode) && a.w_scale != nullptr && a.x_scale != nullptr && Aligned16(a.x) &&
         Aligned16(a.w) && Aligned16(a.out) && TensorMapsAvailable();
}

size_t GemmFp8WgmmaWorkspaceBytes(int num_sms) {
  return StreamKWorkspaceBytes(num_sms, kMaxSlotFloats);
}

absl::Status LaunchGemmFp8Wgmma(const Fp8GemmArgs& args, int num_sms, void* workspace, size_t workspace_bytes,
                                const GemmFp8WgmmaOptions& options, Stream stream) {
  if (!GemmFp8WgmmaSupports(args))
    return absl::InvalidArgumentError(absl::StrCat("GemmFp8Wgmma: unsupported call m ", args.m, " n ", args.n,
                                                   " k ", args.k, " out ",
                                                   std::string(DTypeName(args.out_dtype))));
  if (num_sms < 1 || workspace == nullptr || workspace_bytes < GemmFp8WgmmaWorkspaceBytes(num_sms))
    return absl::InvalidArgumentError("GemmFp8Wgmma: no workspace");
  if (args.out_dtype == DType::kBF16)
    return LaunchRows<__nv_bfloat16>(args, num_sms, workspace, workspace_bytes, options, stream);
  return LaunchRows<__half>(args, num_sms, workspace, workspace_bytes, options, stream);
}

}  // namespace llm::cuda
