#include "kernels/cuda/gemm/gemv_w4a16.h"

#include <algorithm>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/gemm/gemv_register_finish.cuh"
#include "kernels/cuda/gemm/gemv_smem_ring.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;   // warps per block (register form)
constexpr int kUnroll = 4;  // 16-byte weight loads (chunks) in flight per lane (x2 with the prefetch)
constexpr int64_t kMaxRegisterSmem = 96 << 10;  // staged scales of the register form's block rows

struct W4Args {
  const uint8_t* codes;
  const __half* scales;
  const uint8_t* zeros;
  const int32_t* chunk_group;
  int groups;
};

__device__ __forceinline__ uint4 LoadU4Streaming(const void* p) {
  uint4 u;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p));
  return u;
}

// Shared memory of the weights' side data of `rows` rows: the chunk groups (i32 [kv]), then the
// rows' scales (f16 [rows, groups]) and zeros (u8 [rows, groups]).
struct SideLayout {
  int scale_offset = 0, zero_offset = 0;
  size_t bytes = 0;
};
SideLayout SideLayoutFor(int rows, int kv, int groups, bool zeros) {
  SideLayout s;
  s.scale_offset = kv * 4;
  s.zero_offset = s.scale_offset + (rows * groups * 2 + 15) / 16 * 16;
  s.bytes = static_cast<size_t>(s.zero_offset + (zeros ? (rows * groups + 15) / 16 * 16 : 0));
  return s;
}

// Stages the chunk groups and rows [row0, row0 + rows) 's scales and zeros (rows past n: scale 0).
template <bool kZeros>
__device__ __forceinline__ void StageSide(const W4Args& w, int row0, int rows, int n, int kv, unsigned char* base,
                                          const SideLayout& layout) {
  int32_t* s_group = reinterpret_cast<int32_t*>(base);
  __half* s_scale = reinterpret_cast<__half*>(base + layout.scale_offset);
  uint8_t* s_zero = base + layout.zero_offset;
  for (int i = threadIdx.x; i < kv; i += blockDim.x) s_group[i] = __ldg(w.chunk_group + i);
  const int cells = rows * w.groups;
  const int64_t first = static_cast<int64_t>(row0) * w.groups;
  for (int i = threadIdx.x; i < cells; i += blockDim.x) {
    const bool in = row0 + i / w.groups < n;
    s_scale[i] = in ? w.scales[first + i] : __float2half(0.0f);
    if (kZeros) s_zero[i] = in ? __ldg(w.zeros + first + i) : static_cast<uint8_t>(kW4SymmetricZero);
  }
}

// Register form: as GemvFp8Kernel (gemv_fp8.cu): a block = kWarps / wpr output rows, the wpr
// warps of a row each stream a contiguous slice of its chunks (lanes strided by 16 bytes), the
// next loads issued before the current ones are consumed, the first ones (and the side data)
// before the dependency wait.
template <typename T, typename TOut, int M, bool kZeros>
__global__ void __launch_bounds__(kWarps * 32)
    GemvW4A16Kernel(const T* __restrict__ x, W4Args w, const T* __restrict__ bias, TOut* __restrict__ out,
                    int m_rows, int n, int kp, int wpr, SideLayout layout) {
  constexpr int kStep = 32 * kUnroll;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float partial[kWarps][M];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kWarps / wpr;
  const int row0 = blockIdx.x * rows_per_block, local = warp / wpr, part = warp % wpr;
  const int row = row0 + local;
  const bool active = row < n;
  const int kv = kp / kW4Chunk;
  const int len = (kv + wpr - 1) / wpr;
  const int begin = min(kv, part * len), end = min(kv, begin + len);
  const uint8_t* wr = w.codes + static_cast<int64_t>(active ? row : 0) * (kp / 2);

  uint4 cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int idx = begin + lane + u * 32;
    cur[u] = make_uint4(0, 0, 0, 0);
    if (active && idx < end) cur[u] = LoadU4Streaming(wr + idx * kW4ChunkBytes);
  }
  StageSide<kZeros>(w, row0, rows_per_block, n, kv, smem, layout);
  __syncthreads();
  GridDependencyWait();

  const int32_t* s_group = reinterpret_cast<const int32_t*>(smem);
  const __half* my_scales = reinterpret_cast<const __half*>(smem + layout.scale_offset) + local * w.groups;
  const uint8_t* my_zeros = smem + layout.zero_offset + local * w.groups;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int base = begin; base < end; base += kStep) {
    uint4 nxt[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + kStep + lane + u * 32;
      nxt[u] = make_uint4(0, 0, 0, 0);
      if (active && idx < end) nxt[u] = LoadU4Streaming(wr + idx * kW4ChunkBytes);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + lane + u * 32;
      if (idx < end) {
        const int g = s_group[idx];
        const float s = __half2float(my_scales[g]);
        float wf[kW4Chunk];
        W4DequantChunk<T>(cur[u], W4ZeroPair<T>(kZeros ? my_zeros[g] : kW4SymmetricZero), wf);
#pragma unroll
        for (int m = 0; m < M; ++m)
          if (m < m_rows) acc[m] += s * W4DotChunk<T>(wf, x + static_cast<int64_t>(m) * kp + idx * kW4Chunk);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = nxt[u];
  }
  AllowDependentLaunch();  // only now (see GemvKernel)
  FinishRegisterGemv(acc, 1.0f, active, warp, lane, wpr, row, rows_per_block, m_rows, n, bias, out, partial);
}

// Ring form: GemvRingKernel (gemv_smem_ring.cuh) with int4 units: each warp's lane 0 bulk-copies
// the warp's (row, K segment) units of code bytes into its ring of stages, x is staged whole in
// shared memory, and every lane dequantizes one 32-column chunk at a time from the stage. The
// side data (chunk groups, the block's rows' scales and zeros) follows the ring at
// `side_offset`.
template <typename T, typename TOut, int M, bool kZeros>
__global__ void __launch_bounds__(kRingWarps * 32, 2)
    GemvW4A16RingKernel(const T* __restrict__ x, W4Args w, const T* __restrict__ bias, TOut* __restrict__ out,
                        int m_rows, int n, int kp, GemvRingPlan plan, int side_offset, SideLayout layout) {
  constexpr int kXVec = Vec16<T>::kVec;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stages = plan.stages, split = plan.split;
  const uint32_t chunk_bytes = static_cast<uint32_t>(plan.chunk_vecs) * kW4ChunkBytes;  // bytes a unit
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * stages;
  float* partial = reinterpret_cast<float*>(smem + plan.partial_offset);
  T* xs = reinterpret_cast<T*>(smem + plan.x_offset);
  unsigned char* ring = smem + plan.ring_offset + static_cast<size_t>(warp) * stages * chunk_bytes;
  unsigned char* side = smem + side_offset;

  const int row0 = blockIdx.x * plan.rows_per_block;
  const int rows = min(plan.rows_per_block, n - row0);
  const int units = rows * split;
  const int my_units = units > warp ? (units - warp + kRingWarps - 1) / kRingWarps : 0;
  const uint8_t* w_block = w.codes + static_cast<int64_t>(row0) * (kp / 2);
  auto unit_of = [&](int j) { return warp + j * kRingWarps; };

  auto src_of = [&](int j) { return w_block + static_cast<int64_t>(unit_of(j)) * chunk_bytes; };
  const uint64_t policy = StartRing(lane, stages, my_units, bars, ring, chunk_bytes, src_of);
  const int kv = kp / kW4Chunk;
  StageSide<kZeros>(w, row0, plan.rows_per_block, n, kv, side, layout);
  GridDependencyWait();  // x is the predecessor's output
  StageXInShared(x, xs, m_rows * (kp / kXVec));
  __syncthreads();

  const int32_t* s_group = reinterpret_cast<const int32_t*>(side);
  const __half* s_scale = reinterpret_cast<const __half*>(side + layout.scale_offset);
  const uint8_t* s_zero = side + layout.zero_offset;
  for (int j = 0; j < my_units; ++j) {
    const int s = j % stages;
    MbarrierWait(&bars[s], (j / stages) & 1);
    const int unit = unit_of(j);
    const int r = unit / split, seg = unit % split;
    const unsigned char* wv = ring + s * chunk_bytes;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
#pragma unroll 2
    for (int v = lane; v < plan.chunk_vecs; v += 32) {
      const int c = seg * plan.chunk_vecs + v;  // the chunk within the row
      const int g = s_group[c];
      const float scale = __half2float(s_scale[r * w.groups + g]);
      float wf[kW4Chunk];
      W4DequantChunk<T>(*reinterpret_cast<const uint4*>(wv + v * kW4ChunkBytes),
                        W4ZeroPair<T>(kZeros ? s_zero[r * w.groups + g] : kW4SymmetricZero), wf);
#pragma unroll
      for (int m = 0; m < M; ++m)
        if (m < m_rows) acc[m] += scale * W4DotChunk<T>(wf, xs + m * kp + c * kW4Chunk);
    }
    RefillRingStage(lane, j, stages, my_units, ring + s * chunk_bytes, src_of, chunk_bytes, &bars[s], policy);
    KeepUnitSums(acc, 1.0f, partial, unit, lane);
  }
  StoreRowSums<M>(partial, rows, split, m_rows, bias, row0, n, out);
}

int AutoWarpsPerRow(int64_t n, int64_t kp, int num_sms) {
  int wpr = 1;
  while (wpr < kWarps && n * wpr / kWarps < 12 * int64_t{num_sms} && kp / kW4Chunk / (2 * wpr) >= 32) wpr *= 2;
  return wpr;
}

// The ring for an N x Kp int4 weight: a GemvRingPlan over the code bytes (Kp / 2 a row, 16-byte
// vectors = chunks) whose x is 16-bit (4 bytes per code byte... of x per 2 columns), with room
// after it for the side data of its block rows. False when it does not fit.
bool PlanW4Ring(int64_t m_template, int64_t n, int64_t kp, int64_t groups, bool zeros, int x_elem_bytes, int num_sms,
                size_t ring_bytes, GemvRingPlan* plan, int* side_offset, SideLayout* layout) {
  if (kp % kW4Chunk != 0 || n <= 0) return false;
  const int64_t rows_per_block = (n + num_sms - 1) / num_sms;
  const int64_t x_bytes = m_template * kp * x_elem_bytes;
  *layout = SideLayoutFor(static_cast<int>(rows_per_block), static_cast<int>(kp / kW4Chunk), static_cast<int>(groups),
                          zeros);
  const int64_t side = static_cast<int64_t>(layout->bytes) + 16;
  const int64_t budget =
      (ring_bytes > 0 ? static_cast<int64_t>(ring_bytes) : kRingMaxSmemBytes - x_bytes - (int64_t{8} << 10)) - side;
  if (budget <= 0) return false;
  // x per code byte: 2 columns of x_elem_bytes.
  if (!PlanGemvRing(n, kp / 2, 1, static_cast<int>(m_template), num_sms, static_cast<size_t>(budget), plan,
                    2 * x_elem_bytes))
    return false;
  *side_offset = static_cast<int>((plan->smem_bytes + 15) / 16 * 16);
  plan->smem_bytes = static_cast<size_t>(*side_offset) + layout->bytes;
  return static_cast<int64_t>(plan->smem_bytes) <= kRingMaxSmemBytes && plan->rows_per_block == rows_per_block;
}

template <typename T, typename TOut, int M, bool kZeros>
cudaError_t LaunchRing(const T* x, const W4Args& w, const T* bias, TOut* out, int m, int n, int kp,
                       const GemvRingPlan& plan, int side_offset, const SideLayout& layout, bool pdl,
                       cudaStream_t stream) {
  auto kernel = GemvW4A16RingKernel<T, TOut, M, kZeros>;
  const cudaError_t err = AllowDynamicSmem(kernel, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  return LaunchKernel(kernel, dim3(plan.blocks), dim3(kRingWarps * 32), plan.smem_bytes, stream, pdl, x, w, bias, out,
                      m, n, kp, plan, side_offset, layout);
}

template <typename T, typename TOut, int M, bool kZeros>
cudaError_t LaunchRegister(const T* x, const W4Args& w, const T* bias, TOut* out, int m, int n, int kp, int wpr,
                           bool pdl, cudaStream_t stream) {
  const int rows_per_block = kWarps / wpr;
  const SideLayout layout = SideLayoutFor(rows_per_block, kp / kW4Chunk, w.groups, kZeros);
  auto kernel = GemvW4A16Kernel<T, TOut, M, kZeros>;
  const cudaError_t err = AllowDynamicSmem(kernel, layout.bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((n + rows_per_block - 1) / rows_per_block);
  return LaunchKernel(kernel, grid, dim3(kWarps * 32), layout.bytes, stream, pdl, x, w, bias, out, m, n, kp, wpr,
                      layout);
}

template <typename T, typename TOut, bool kZeros>
absl::Status LaunchRows(const void* xv, const W4Args& w, const void* bv, void* ov, int m, int n, int kp,
                        const GemvOptions& o, Stream stream) {
  const T* x = static_cast<const T*>(xv);
  const T* bias = static_cast<const T*>(bv);
  TOut* out = static_cast<TOut*>(ov);
  const int mt = RingRowsTemplate(m);
  cudaError_t err;
  GemvRingPlan plan;
  int side_offset = 0;
  SideLayout layout;
  if (o.smem_ring && PlanW4Ring(mt, n, kp, w.groups, kZeros, sizeof(T), o.num_sms, o.ring_bytes, &plan, &side_offset,
                                &layout)) {
    err = mt == 1   ? LaunchRing<T, TOut, 1, kZeros>(x, w, bias, out, m, n, kp, plan, side_offset, layout, o.pdl, stream)
          : mt == 2 ? LaunchRing<T, TOut, 2, kZeros>(x, w, bias, out, m, n, kp, plan, side_offset, layout, o.pdl, stream)
          : mt == 4 ? LaunchRing<T, TOut, 4, kZeros>(x, w, bias, out, m, n, kp, plan, side_offset, layout, o.pdl, stream)
                    : LaunchRing<T, TOut, 8, kZeros>(x, w, bias, out, m, n, kp, plan, side_offset, layout, o.pdl, stream);
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  const int wpr = o.warps_per_row > 0 ? o.warps_per_row : AutoWarpsPerRow(n, kp, o.num_sms);
  if (wpr != 1 && wpr != 2 && wpr != 4 && wpr != 8) return absl::InvalidArgumentError("GemvW4A16: warps_per_row");
  err = mt == 1   ? LaunchRegister<T, TOut, 1, kZeros>(x, w, bias, out, m, n, kp, wpr, o.pdl, stream)
        : mt == 2 ? LaunchRegister<T, TOut, 2, kZeros>(x, w, bias, out, m, n, kp, wpr, o.pdl, stream)
        : mt == 4 ? LaunchRegister<T, TOut, 4, kZeros>(x, w, bias, out, m, n, kp, wpr, o.pdl, stream)
                  : LaunchRegister<T, TOut, 8, kZeros>(x, w, bias, out, m, n, kp, wpr, o.pdl, stream);
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const W4A16Weights& w, const void* bias, void* out, int m, int n, int kp,
                         const GemvOptions& o, Stream stream) {
  const W4Args a{w.codes, static_cast<const __half*>(w.scales), w.zeros, w.chunk_group, static_cast<int>(w.groups)};
  if (w.zeros != nullptr) return LaunchRows<T, TOut, true>(x, a, bias, out, m, n, kp, o, stream);
  return LaunchRows<T, TOut, false>(x, a, bias, out, m, n, kp, o, stream);
}

}  // namespace

bool GemvW4A16Supported(DType dtype, int64_t n, int64_t kp, int64_t groups) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && n > 0 && n <= 0x7fffffff && kp > 0 &&
         kp % kW4Chunk == 0 && kp <= 0x7fffffff && groups >= 1 && groups <= kp &&
         static_cast<int64_t>(SideLayoutFor(kWarps, static_cast<int>(kp / kW4Chunk), static_cast<int>(groups), true)
                                  .bytes) <= kMaxRegisterSmem;
}

bool GemvW4A16RingFits(DType dtype, int64_t m, int64_t n, int64_t kp, int64_t groups, size_t ring_bytes,
                       int num_sms) {
  GemvRingPlan plan;
  int side_offset;
  SideLayout layout;
  return m >= 1 && m <= kGemvMaxRows && GemvW4A16Supported(dtype, n, kp, groups) &&
         PlanW4Ring(RingRowsTemplate(m), n, kp, groups, /*zeros=*/true, static_cast<int>(DTypeSize(dtype)), num_sms,
                    ring_bytes, &plan, &side_offset, &layout);
}

absl::Status LaunchGemvW4A16(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                             void* out, int64_t m, int64_t n, int64_t kp, const GemvOptions& options, Stream stream) {
  if (m < 0 || m > kGemvMaxRows || !GemvW4A16Supported(dtype, n, kp, w.groups) || w.codes == nullptr ||
      w.scales == nullptr || w.chunk_group == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("GemvW4A16: unsupported shape m ", m, " n ", n, " kp ", kp,
                                                   " groups ", w.groups));
  if (!Aligned16(x) || !Aligned16(w.codes)) return absl::InvalidArgumentError("GemvW4A16: x and codes must be 16-byte aligned");
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(kp);
  if (dtype == DType::kBF16) {
    if (out_dtype == DType::kBF16)
      return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(x, w, bias, out, mi, ni, ki, options, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__nv_bfloat16, float>(x, w, bias, out, mi, ni, ki, options, stream);
  } else {
    if (out_dtype == DType::kF16) return LaunchTyped<__half, __half>(x, w, bias, out, mi, ni, ki, options, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__half, float>(x, w, bias, out, mi, ni, ki, options, stream);
  }
  return absl::InvalidArgumentError("GemvW4A16: output dtype must be the input dtype or float32");
}

}  // namespace llm::cuda
