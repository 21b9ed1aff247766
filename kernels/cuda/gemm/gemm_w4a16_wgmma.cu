#include "kernels/cuda/gemm/gemm_w4a16_wgmma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/gemm/stream_k.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

constexpr int kBoxBytes = kTensorMapBoxBytes;  // a TMA box's row: 64 columns of 16-bit x
constexpr int kUnitCols = kW4Chunk * kW4UnitChunks;                     // a stage's K: one unit, 128 columns
constexpr int kUnitBytes = kW4TileRows * kW4UnitChunks * kW4ChunkBytes;  // a 16-row tile's unit: 1 KB
constexpr int kXBoxes = kUnitCols * 2 / kBoxBytes;                       // x boxes a stage: 2
constexpr int kMmaK = 16;
constexpr int kTileRows = 128;  // W rows a block's tile: two warpgroups of 64 rows (4 layout tiles each)
constexpr int kLayoutTiles = kTileRows / kW4TileRows;
constexpr int kConsumers = 256;            // two warpgroups
constexpr int kThreads = kConsumers + 128;  // and the producer warpgroup (one thread copies)
// Registers a thread after the split (setmaxnreg): the producer's few, the consumers' 64 + 64 sums
// and 32 fragment registers a thread at 128 tokens (the launch's even share, 168, spills).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kConsumers * kConsumerRegs + 128 * kProducerRegs <= 65536, "the split fits the register file");
constexpr int kSmemBudget = 200 << 10;
constexpr int kMaxSlotFloats = kTileRows * kGemmW4A16WgmmaPassRows;

// A stage: the codes of one unit of the tile's eight 16-row layout tiles (eight bulk copies of 1
// KB, in tile order), then x's kTokens rows of the unit's 128 columns as two TMA boxes (64
// columns each, 128-byte swizzle).
template <int kTokens>
struct W4WgmmaTile {
  static constexpr int kCodeBytes = kLayoutTiles * kUnitBytes;
  static constexpr int kXBoxBytes = kTokens * kBoxBytes;
  static constexpr int kStageBytes = kCodeBytes + kXBoxes * kXBoxBytes;
  static_assert(kStageBytes % 1024 == 0, "stages keep the swizzle's 1024-byte alignment");
  static constexpr int kStages = kSmemBudget / kStageBytes > 12 ? 12 : kSmemBudget / kStageBytes;
  static_assert(kStages >= 3, "a pipeline of three stages fits");
  static constexpr int kBarOffset = kStages * kStageBytes;  // full barriers, then empty ones
  static constexpr int kFlagOffset = kBarOffset + 2 * kStages * 8;
  // And room to align the base to 1024; a block has its SM to itself (stream_k.cuh).
  static constexpr int kSmemBytes = StreamKBlockSmemBytes(kFlagOffset + 16 + 1024);
  static constexpr int kAcc = kTokens / 2;                    // sums a thread holds
  static constexpr int kSlotFloats = kTileRows * kTokens;     // a straddling tile's sums
  static_assert(kSlotFloats <= kMaxSlotFloats, "the workspace's slots hold a tile's sums");
};

template <typename T>
constexpr WgmmaRsType RsTypeOf() {
  return std::is_same_v<T, __half> ? WgmmaRsType::kF16 : WgmmaRsType::kBF16;
}

// Threads 0-255 (two warpgroups) take the MMAs: warp w of warpgroup c the layout tile 4 c + w of
// the block's 128 rows, as the 16 rows of A it holds in registers; thread 256 (of the third
// warpgroup, which gives its registers to the two others) issues the copies, each stage after the
// eight consumer warps released it (empty barrier). A unit's eight MMAs (K = 16 each) sum into
// `part` from zero; once they are done the stage is released and `part`, times the rows' scales of
// the unit's group, is added to the totals (the other warpgroup's MMAs keep the tensor cores busy
// meanwhile). The codes of the first stages are loaded before the
// dependency wait (W is no kernel's output), x's after.
template <typename T, int kTokens>
__global__ void __launch_bounds__(kThreads, 1)
    GemmW4A16WgmmaKernel(const __grid_constant__ CUtensorMap x_map, const uint8_t* __restrict__ codes,
                         const __half* __restrict__ scales, const uint8_t* __restrict__ zeros, int groups,
                         int units_per_group, const T* __restrict__ bias, T* __restrict__ out, int m, int n, int kp,
                         int steps, float* __restrict__ slots, unsigned* __restrict__ counters) {
  using C = W4WgmmaTile<kTokens>;
  constexpr int kStages = C::kStages;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (SharedAddress(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
  uint64_t* empty = full + kStages;
  unsigned* last_flag = reinterpret_cast<unsigned*>(smem + C::kFlagOffset);
  const int tid = threadIdx.x;
  const int tiles = (n + kTileRows - 1) / kTileRows, layout_tiles = n / kW4TileRows;
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

  if (tid >= kConsumers) {  // the producer warpgroup: one thread copies
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (tid != kConsumers) return;
    const uint64_t stream = L2EvictFirstPolicy(), keep = L2EvictLastPolicy();
    const int64_t tile_bytes = static_cast<int64_t>(kW4TileRows) * (kp / 2);  // a layout tile's codes
    auto present_tiles = [&](int it) { return min(kLayoutTiles, layout_tiles - (it / steps) * kLayoutTiles); };
    auto load_codes = [&](int s, int it) {
      const int first = (it / steps) * kLayoutTiles, unit = it % steps, present = present_tiles(it);
      MbarrierArriveExpectTx(&full[s], present * kUnitBytes + kXBoxes * C::kXBoxBytes);
      for (int t = 0; t < present; ++t)
        BulkCopyToShared(smem + s * C::kStageBytes + t * kUnitBytes,
                         codes + (first + t) * tile_bytes + static_cast<int64_t>(unit) * kUnitBytes, kUnitBytes,
                         &full[s], stream);
    };
    auto load_x = [&](int s, int it) {
      for (int b = 0; b < kXBoxes; ++b)
        TensorTileToShared(smem + s * C::kStageBytes + C::kCodeBytes + b * C::kXBoxBytes, &x_map,
                           (it % steps) * kUnitCols * 2 + b * kBoxBytes, 0, &full[s], keep);
    };
    const int pre = count < kStages ? count : kStages;
    for (int s = 0; s < pre; ++s) load_codes(s, begin + s);
    GridDependencyWait();  // x is the previous kernel's output
    for (int s = 0; s < pre; ++s) load_x(s, begin + s);
    for (int local = pre; local < count; ++local) {
      const int s = local % kStages;
      MbarrierWait(&empty[s], ((local / kStages) - 1) & 1);
      load_codes(s, begin + local);
      load_x(s, begin + local);
    }
    return;  // the producer's exit counts as its part of the launch trigger
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  GridDependencyWait();  // the output and the workspace
  const int lt = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;  // lt: the warp's layout tile
  float part[C::kAcc], acc[C::kAcc];
  auto zero = [&] {
#pragma unroll
    for (int r = 0; r < C::kAcc; ++r) acc[r] = 0.0f;
  };
  // acc[4 j + e]: W row 16 lt + lane / 4 (+ 8 for e >= 2) of the tile, token 8 j + 2 (lane % 4) +
  // e % 2 (wgmma.cuh).
  auto store = [&](int tile) {
    const int row0 = tile * kTileRows + kW4TileRows * lt + g;
    if (row0 >= n) return;  // a tile past N (n is a multiple of 16: rows g and g + 8 go together)
#pragma unroll
    for (int r = 0; r < C::kAcc; ++r) {
      const int row = row0 + ((r & 2) ? 8 : 0), token = 8 * (r >> 2) + 2 * t + (r & 1);
      if (token < m)
        out[static_cast<int64_t>(token) * n + row] = FromFloat<T>(acc[r] + (bias ? ToFloat(bias[row]) : 0.0f));
    }
  };
  // The tile's sums over units [from, to) are done: write them, or, for a tile that straddles
  // blocks, store them in this block's slot; the last contributor adds the slots in block order
  // and writes the tile (stream_k.cuh).
  auto finish = [&](int tile, int from, int to) {
    if (from == 0 && to == steps) return store(tile);
    if (StreamKSumStraddle<kConsumers, 1>(acc, StreamKStraddle(tile, steps, total, blocks), slots, C::kSlotFloats,
                                          counters, last_flag, tid))
      store(tile);
  };

  // Where an iteration is, kept by increments (a division by a runtime value costs tens of
  // instructions, and the loop is bound by its instructions: two consumer warps a scheduler).
  struct Cursor {
    int tile, step, group, in_group, slot, phase;
    __device__ void Advance(int steps, int units_per_group) {
      if (++step == steps) {
        step = group = in_group = 0;
        ++tile;
      } else if (++in_group == units_per_group) {
        in_group = 0;
        ++group;
      }
      if (++slot == kStages) slot = 0, phase ^= 1;
    }
  };
  // A unit's scales and zeros for this warp's rows g and g + 8 (weights: loaded a unit ahead).
  struct UnitParams {
    float scale_a = 0.0f, scale_b = 0.0f;
    uint32_t zero_a = 0, zero_b = 0;
  };
  auto params_of = [&](const Cursor& c) {
    UnitParams p;
    const int row_a = c.tile * kTileRows + kW4TileRows * lt + g;
    int za = kW4SymmetricZero, zb = kW4SymmetricZero;
    if (row_a < n) {
      const int64_t at = static_cast<int64_t>(row_a) * groups + c.group;
      p.scale_a = __half2float(scales[at]);
      p.scale_b = __half2float(scales[at + 8 * groups]);
      if (zeros != nullptr) za = zeros[at], zb = zeros[at + 8 * groups];
    }
    p.zero_a = W4ZeroPair<T>(za), p.zero_b = W4ZeroPair<T>(zb);
    return p;
  };
  // Half `half` of a unit's fragments (K steps 4 half .. + 3: chunks 2 half and 2 half + 1): for K
  // step 2 c + h, chunk c's words 2 h and 2 h + 1 of rows g and g + 8, each lane taking its column
  // pair t of every word (natural column order, the order of x's columns in the B tile). A layout
  // tile past N reads whatever its stage slot holds: an MMA row depends on its own A row alone,
  // and those rows are never stored.
  auto dequant_half = [&](const Cursor& cu, int half, const UnitParams& p, uint32_t (&a)[4][4]) {
    const unsigned char* unit = smem + cu.slot * C::kStageBytes + lt * kUnitBytes;
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const int c = 2 * half + cc;
      const uint4 qa = *reinterpret_cast<const uint4*>(unit + g * kW4UnitChunks * kW4ChunkBytes + c * kW4ChunkBytes);
      const uint4 qb =
          *reinterpret_cast<const uint4*>(unit + (g + 8) * kW4UnitChunks * kW4ChunkBytes + c * kW4ChunkBytes);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a[2 * cc + h][0] = W4ValuePair<T>(W4Word(qa, 2 * h), t, p.zero_a);
        a[2 * cc + h][1] = W4ValuePair<T>(W4Word(qb, 2 * h), t, p.zero_b);
        a[2 * cc + h][2] = W4ValuePair<T>(W4Word(qa, 2 * h + 1), t, p.zero_a);
        a[2 * cc + h][3] = W4ValuePair<T>(W4Word(qb, 2 * h + 1), t, p.zero_b);
      }
    }
  };
  const uint32_t base = SharedAddress(smem);
  auto issue_half = [&](const Cursor& cu, int half, uint32_t (&a)[4][4]) {
    const uint32_t x_addr = base + cu.slot * C::kStageBytes + C::kCodeBytes + half * C::kXBoxBytes;
#pragma unroll
    for (int j = 0; j < 4; ++j) WgmmaFenceOperands(a[j]);
    WgmmaFenceOperands(part);
    WgmmaFence();
#pragma unroll
    for (int j = 0; j < 4; ++j)
      WgmmaRs<RsTypeOf<T>(), kTokens>::Run(part, a[j], WgmmaDescSwizzle128(x_addr + j * kMmaK * 2),
                                           half > 0 || j > 0);
    WgmmaCommit();
  };
  auto wait_full = [&](const Cursor& cu, bool last) {
    MbarrierWait(&full[cu.slot], cu.phase);
    // All of W this block reads has landed: the next kernel may launch and take its place beside
    // it (it still waits for the whole grid before reading the output).
    if (last) AllowDependentLaunch();
  };

  // Per unit: its first half's MMAs run while the second half's fragments are formed, the
  // second's while the next unit's first half is (once the first half's MMAs are done: they read
  // those registers); then the unit's sums are scaled into the totals and its stage released.
  zero();
  uint32_t a0[4][4], a1[4][4];
  Cursor cur{begin / steps, begin % steps, (begin % steps) / units_per_group, (begin % steps) % units_per_group, 0, 0};
  UnitParams cur_p, nxt_p;
  if (count > 0) {
    cur_p = params_of(cur);
    wait_full(cur, count == 1);
    dequant_half(cur, 0, cur_p, a0);
  }
  // A segment: the units of one tile in this block's range. Its sums are finished after its loop
  // (inside the loop, the finishing path kept the totals where the scaling FMAs wrote them and
  // copied them back every unit).
  for (int local = 0; local < count;) {
    const int tile = cur.tile, seg_from = cur.step;
    const int seg_units = min(steps - seg_from, count - local);
    for (int end = local + seg_units; local < end; ++local) {
      const bool more = local + 1 < count;
      Cursor nxt = cur;
      nxt.Advance(steps, units_per_group);
      if (more) nxt_p = params_of(nxt);
      issue_half(cur, 0, a0);
      dequant_half(cur, 1, cur_p, a1);
      issue_half(cur, 1, a1);
      if (more) {
        wait_full(nxt, local + 1 == count - 1);
        WgmmaWait<1>();  // the first half's MMAs are done with a0
#pragma unroll
        for (int j = 0; j < 4; ++j) WgmmaFenceOperands(a0[j]);
        dequant_half(nxt, 0, nxt_p, a0);
      }
      WgmmaWait<0>();
      WgmmaFenceOperands(part);
#pragma unroll
      for (int j = 0; j < 4; ++j) WgmmaFenceOperands(a1[j]);
      __syncwarp();
      if (lane == 0) MbarrierArrive(&empty[cur.slot]);  // the stage's operands are read
#pragma unroll
      for (int r = 0; r < C::kAcc; ++r) acc[r] += ((r & 2) ? cur_p.scale_b : cur_p.scale_a) * part[r];
      cur = nxt;
      cur_p = nxt_p;
    }
    finish(tile, seg_from, seg_from + seg_units);
    zero();
  }
}

template <typename T, int kTokens>
absl::Status LaunchPass(const void* x, const W4A16Weights& w, const void* bias, void* out, int m, int n, int kp,
                        int num_sms, void* workspace, size_t workspace_bytes, bool pdl, Stream stream) {
  using C = W4WgmmaTile<kTokens>;
  auto kernel = GemmW4A16WgmmaKernel<T, kTokens>;
  CUtensorMap x_map;
  RETURN_IF_ERROR(EncodeSwizzledRows(&x_map, x, m, static_cast<int64_t>(kp) * 2, kTokens, "GemmW4A16Wgmma"));
  const int steps = kp / kUnitCols;
  const int total = (n + kTileRows - 1) / kTileRows * steps;
  const int blocks = std::min(total, num_sms);
  const StreamKSlots sums = StreamKSlotsIn(workspace, workspace_bytes, num_sms, blocks, C::kSlotFloats);
  if (sums.slots == nullptr) return absl::InternalError("GemmW4A16Wgmma: workspace too small");
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, C::kSmemBytes));
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(blocks), dim3(kThreads), C::kSmemBytes, stream, pdl, x_map, w.codes,
                                    static_cast<const __half*>(w.scales), w.zeros, static_cast<int>(w.groups),
                                    static_cast<int>(w.group_chunks / kW4UnitChunks), static_cast<const T*>(bias),
                                    static_cast<T*>(out), m, n, kp, steps, sums.slots, sums.counters));
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchTyped(const void* x, const W4A16Weights& w, const void* bias, void* out, int64_t m, int64_t n,
                         int64_t kp, int num_sms, void* workspace, size_t workspace_bytes,
                         const GemmW4A16WgmmaOptions& options, Stream stream) {
  for (int64_t m0 = 0; m0 < m; m0 += kGemmW4A16WgmmaPassRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kGemmW4A16WgmmaPassRows, m - m0));
    const void* xp = static_cast<const T*>(x) + m0 * kp;
    void* op = static_cast<T*>(out) + m0 * n;
    auto pass = rows <= 32 ? LaunchPass<T, 32> : rows <= 64 ? LaunchPass<T, 64> : LaunchPass<T, 128>;
    RETURN_IF_ERROR(pass(xp, w, bias, op, rows, static_cast<int>(n), static_cast<int>(kp), num_sms, workspace,
                         workspace_bytes, options.pdl, stream));
  }
  return absl::OkStatus();
}

}  // namespace

bool GemmW4A16WgmmaSupports(DType dtype, DType out_dtype, const W4A16Weights& w, int64_t m, int64_t n, int64_t kp,
                            const void* x, const void* out) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && out_dtype == dtype && m >= 1 && n >= 16 &&
         n % kW4TileRows == 0 && n < (int64_t{1} << 24) && kp >= kUnitCols && kp % kUnitCols == 0 &&
         kp < (int64_t{1} << 24) && w.group_chunks > 0 && w.group_chunks % kW4UnitChunks == 0 &&
         w.codes != nullptr && w.scales != nullptr && Aligned16(w.codes) && Aligned16(x) && Aligned16(out) &&
         (n + kTileRows - 1) / kTileRows * (kp / kUnitCols) < (int64_t{1} << 30) && TensorMapsAvailable();
}

size_t GemmW4A16WgmmaWorkspaceBytes(int num_sms) { return StreamKWorkspaceBytes(num_sms, kMaxSlotFloats); }

absl::Status LaunchGemmW4A16Wgmma(DType dtype, const void* x, const W4A16Weights& w, const void* bias, void* out,
                                  int64_t m, int64_t n, int64_t kp, int num_sms, void* workspace,
                                  size_t workspace_bytes, const GemmW4A16WgmmaOptions& options, Stream stream) {
  if (!GemmW4A16WgmmaSupports(dtype, dtype, w, m, n, kp, x, out))
    return absl::InvalidArgumentError(absl::StrCat("GemmW4A16Wgmma: unsupported call m ", m, " n ", n, " kp ", kp,
                                                   " ", std::string(DTypeName(dtype))));
  if (num_sms < 1 || workspace == nullptr || workspace_bytes < GemmW4A16WgmmaWorkspaceBytes(num_sms))
    return absl::InvalidArgumentError("GemmW4A16Wgmma: no workspace");
  if (dtype == DType::kBF16)
    return LaunchTyped<__nv_bfloat16>(x, w, bias, out, m, n, kp, num_sms, workspace, workspace_bytes, options, stream);
  return LaunchTyped<__half>(x, w, bias, out, m, n, kp, num_sms, workspace, workspace_bytes, options, stream);
}

}  // namespace llm::cuda
