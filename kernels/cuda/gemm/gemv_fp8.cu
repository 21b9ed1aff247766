#include "kernels/cuda/gemm/gemv_fp8.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/gemm/gemv_fp8_mma.cuh"
#include "kernels/cuda/gemm/gemv_register_finish.cuh"
#include "kernels/cuda/gemm/gemv_smem_ring.cuh"
#include "kernels/cuda/norm/rms_norm_prologue.cuh"
#include "kernels/cuda/rope/qkv_rope_epilogue.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;        // warps per block (register form)
constexpr int kUnroll = 4;       // 16-byte weight loads in flight per lane (x2 with the prefetch)
constexpr int kWVec = 16;        // E4M3 elements per 16-byte weight vector
constexpr int kScaleGroup = 128;  // columns per grouped scale
constexpr int kVecsPerGroup = kScaleGroup / kWVec;
static_assert(kScaleGroup % kWVec == 0, "a weight vector never straddles two scales");

// The scale arguments as the kernels read them: `grouped` scales change every 128 columns
// (blocks, groups); otherwise one scale a row (tensor, channel), applied to the row's sum.
struct ScaleArgs {
  const float* scale;
  int rows_per;
  int cols;
};

// 16 weights times the same 16 columns of x (two 16-byte vectors of T).
template <typename T>
__device__ __forceinline__ float Dot16(const float (&wf)[16], const T* x) {
  const Vec16<T> a = LoadVec(x), b = LoadVec(x + 8);
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) s += wf[e] * ToFloat(a.v[e]);
#pragma unroll
  for (int e = 0; e < 8; ++e) s += wf[8 + e] * ToFloat(b.v[e]);
  return s;
}

// Register form: as GemvKernel (gemv.cu): a block = kWarps / wpr output rows, the wpr warps of a
// row each stream a contiguous slice of its 16-byte vectors (lanes strided by 16 bytes), the next
// loads issued before the current ones are consumed, the first ones before the dependency wait.
// kFusable (16-bit out): the instantiation that may normalize x itself into shared memory first
// (`norm`), add its outputs into out (`add_to_out`) or end in RoPE and the KV cache (`rope`, set
// where rope.q_out is; one warp a row); the others read x from global memory.
template <typename T, typename TOut, int M, bool kGrouped, bool kFusable>
__global__ void __launch_bounds__(kWarps * 32)
    GemvFp8Kernel(const T* __restrict__ x, const uint8_t* __restrict__ w, ScaleArgs sc, const T* __restrict__ bias,
                  TOut* __restrict__ out, int m_rows, int n, int k, int wpr, int glu_f, FusedRmsNorm norm,
                  bool add_to_out, QkvRopeParams rope) {
  constexpr int kStep = 32 * kUnroll;
  __shared__ float partial[kWarps][M];
  extern __shared__ __align__(16) unsigned char normed_rows[];  // kFusable with a norm: x normalized
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows_per_block = kWarps / wpr;
  const bool roped = kFusable && rope.q_out != nullptr;
  // glu_f > 0: the gate/up form (one warp a row; gemv_register_finish.cuh); roped: rotation
  // partners paired in a block (qkv_rope_epilogue.cuh).
  const int row = roped      ? RopeGemvRow(blockIdx.x, warp, rope.head_dim)
                  : glu_f > 0 ? GluGemvRow(blockIdx.x, warp, glu_f)
                              : blockIdx.x * rows_per_block + warp / wpr;
  const int part = warp % wpr;
  const bool active = row < n;
  const int kv = k / kWVec;
  const int len = (kv + wpr - 1) / wpr;
  const int begin = min(kv, part * len), end = min(kv, begin + len);
  const uint8_t* wr = w + static_cast<int64_t>(active ? row : 0) * k;
  const float* row_scales = sc.scale + static_cast<int64_t>(active ? row / sc.rows_per : 0) * sc.cols;

  uint4 cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int idx = begin + lane + u * 32;
    if (active && idx < end) cur[u] = LoadU4Streaming(wr + idx * kWVec);
  }
  GridDependencyWait();
  if constexpr (kFusable) {
    if (norm.weight != nullptr) {
      __shared__ float norm_scratch[16];
      T* xs = reinterpret_cast<T*>(normed_rows);
      NormalizeRowsToShared<T>(x, static_cast<const T*>(norm.weight), norm.eps, m_rows, k, xs, k, norm_scratch);
      x = xs;
    }
  }

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int base = begin; base < end; base += kStep) {
    uint4 nxt[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + kStep + lane + u * 32;
      if (active && idx < end) nxt[u] = LoadU4Streaming(wr + idx * kWVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + lane + u * 32;
      if (idx < end) {
        float wf[16];
        Fp8x16ToFloat(cur[u], wf);
        const float s = kGrouped ? __ldg(row_scales + idx / kVecsPerGroup) : 1.0f;
#pragma unroll
        for (int m = 0; m < M; ++m)
          if (m < m_rows) acc[m] += s * Dot16(wf, x + static_cast<int64_t>(m) * k + idx * kWVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = nxt[u];
  }
  AllowDependentLaunch();  // only now (see GemvKernel)
  const float row_scale = kGrouped || !active ? 1.0f : __ldg(row_scales);
  if constexpr (std::is_same_v<T, TOut>) {
    if (glu_f > 0) {
      FinishRegisterGemvGlu(acc, row_scale, warp, lane, row, m_rows, glu_f, bias, out, partial);
      return;
    }
    if (roped) {
      FinishRegisterGemvRope(acc, row_scale, warp, lane, row, m_rows, bias, rope, partial);
      return;
    }
  }
  FinishRegisterGemv(acc, row_scale, active, warp, lane, wpr, row, rows_per_block, m_rows, n, bias, out, partial,
                     kFusable && add_to_out);
}

// Ring form: GemvRingKernel (gemv_smem_ring.cuh) with E4M3 units: each warp's lane 0 bulk-copies
// the warp's (row, K segment) units of weight bytes into its ring of stages, x is staged whole in
// shared memory, and every lane dequantizes 16 weights at a time from the stage. A unit's
// segment starts at a multiple of chunk_vecs vectors, so vector v of it is column
// segment * chunk_elems + 16 v, and its scale group follows.
template <typename T, typename TOut, int M, bool kGrouped>
__global__ void __launch_bounds__(kRingWarps * 32, 2)
    GemvFp8RingKernel(const T* __restrict__ x, const uint8_t* __restrict__ w, ScaleArgs sc,
                      const T* __restrict__ bias, TOut* __restrict__ out, int m_rows, int n, int k,
                      GemvRingPlan plan) {
  constexpr int kXVec = Vec16<T>::kVec;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stages = plan.stages, split = plan.split;
  const int chunk_elems = plan.chunk_vecs * kWVec;
  const uint32_t chunk_bytes = static_cast<uint32_t>(chunk_elems);
  const RingWarp rw(smem, plan, warp, n, chunk_bytes);
  T* xs = reinterpret_cast<T*>(rw.x);
  const uint8_t* w_block = w + static_cast<int64_t>(rw.row0) * k;
  auto unit_of = [&](int j) { return warp + j * kRingWarps; };

  auto src_of = [&](int j) { return w_block + static_cast<int64_t>(unit_of(j)) * chunk_elems; };
  const uint64_t policy = StartRing(lane, stages, rw.my_units, rw.bars, rw.ring, chunk_bytes, src_of);
  GridDependencyWait();  // x is the predecessor's output
  StageXInShared(x, xs, m_rows * (k / kXVec));
  __syncthreads();

  for (int j = 0; j < rw.my_units; ++j) {
    const int s = j % stages;
    MbarrierWait(&rw.bars[s], (j / stages) & 1);
    const int unit = unit_of(j);
    const int row = rw.row0 + unit / split, seg = unit % split;
    const uint8_t* wv = rw.ring + s * chunk_bytes;
    const T* xk = xs + seg * chunk_elems;
    const float* row_scales = sc.scale + static_cast<int64_t>(row / sc.rows_per) * sc.cols;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
#pragma unroll 2
    for (int v = lane; v < plan.chunk_vecs; v += 32) {
      float wf[16];
      Fp8x16ToFloat(*reinterpret_cast<const uint4*>(wv + v * kWVec), wf);
      const float scale = kGrouped ? row_scales[(seg * chunk_elems + v * kWVec) / kScaleGroup] : 1.0f;
#pragma unroll
      for (int m = 0; m < M; ++m)
        if (m < m_rows) acc[m] += scale * Dot16(wf, xk + m * k + v * kWVec);
    }
    RefillRingStage(lane, j, stages, rw.my_units, rw.ring + s * chunk_bytes, src_of, chunk_bytes, &rw.bars[s],
                    policy);
    KeepUnitSums(acc, kGrouped ? 1.0f : row_scales[0], rw.partial, unit, lane);
  }
  StoreRowSums<M>(rw.partial, rw.rows, split, m_rows, bias, rw.row0, n, out);
}

int AutoWarpsPerRow(int64_t n, int64_t k, int num_sms) {
  int wpr = 1;
  while (wpr < kWarps && n * wpr / kWarps < 12 * int64_t{num_sms} && k / kWVec / (2 * wpr) >= 64) wpr *= 2;
  return wpr;
}

template <typename T, typename TOut, int M, bool kGrouped>
cudaError_t LaunchRing(const T* x, const uint8_t* w, ScaleArgs sc, const T* bias, TOut* out, int m, int n, int k,
                       const GemvRingPlan& plan, const GemvOptions& o, cudaStream_t stream) {
  auto kernel = GemvFp8RingKernel<T, TOut, M, kGrouped>;
  const cudaError_t err = AllowDynamicSmem(kernel, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  return LaunchKernel(kernel, dim3(plan.blocks), dim3(kRingWarps * 32), plan.smem_bytes, stream, o.pdl, x, w, sc,
                      bias, out, m, n, k, plan);
}

template <typename T, typename TOut, int M>
cudaError_t LaunchMma(const T* x, const uint8_t* w, ScaleArgs sc, const T* bias, TOut* out, int m, int n, int k,
                      const GemvFp8MmaPlan& plan, const GemvOptions& o, cudaStream_t stream) {
  auto kernel = GemvFp8MmaKernel<T, TOut, M>;
  const cudaError_t err = AllowDynamicSmem(kernel, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  return LaunchKernel(kernel, dim3(plan.blocks), dim3(kFp8MmaWarps * 32), plan.smem_bytes, stream, o.pdl, x, w,
                      sc.scale, sc.rows_per, sc.cols, bias, out, m, n, k, plan);
}

template <typename T, typename TOut, int M, bool kGrouped>
cudaError_t LaunchRegister(const T* x, const uint8_t* w, ScaleArgs sc, const T* bias, TOut* out, int m, int n, int k,
                           int wpr, int glu_f, const GemvOptions& o, cudaStream_t stream) {
  const dim3 grid(glu_f > 0 ? glu_f / 4 : (n + kWarps / wpr - 1) / (kWarps / wpr));
  if constexpr (std::is_same_v<T, TOut>) {
    if (o.norm.active() || o.add_to_out || o.rope != nullptr) {
      const size_t smem = o.norm.active() ? static_cast<size_t>(m) * k * sizeof(T) : 0;
      const cudaError_t err = AllowDynamicSmem(GemvFp8Kernel<T, TOut, M, kGrouped, true>, smem);
      if (err != cudaSuccess) return err;
      return LaunchKernel(GemvFp8Kernel<T, TOut, M, kGrouped, true>, grid, dim3(kWarps * 32), smem, stream, o.pdl, x,
                          w, sc, bias, out, m, n, k, wpr, glu_f, o.norm, o.add_to_out,
                          o.rope != nullptr ? *o.rope : QkvRopeParams{});
    }
  }
  return LaunchKernel(GemvFp8Kernel<T, TOut, M, kGrouped, false>, grid, dim3(kWarps * 32), 0, stream, o.pdl, x, w, sc,
                      bias, out, m, n, k, wpr, glu_f, FusedRmsNorm{}, false, QkvRopeParams{});
}

// The kernel instantiation for m rows (1, 2, 4 or 8 rows of x per template).
template <typename T, typename TOut, bool kGrouped>
absl::Status LaunchRows(const void* xv, const void* wv, ScaleArgs sc, const void* bv, void* ov, int m, int n, int k,
                        const GemvOptions& o, bool tensor_cores, Stream stream) {
  const T* x = static_cast<const T*>(xv);
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  const T* bias = static_cast<const T*>(bv);
  TOut* out = static_cast<TOut*>(ov);
  const int mt = RingRowsTemplate(m);
  cudaError_t err;
  const int glu_f = static_cast<int>(o.glu_cols);
  GemvFp8MmaPlan mma_plan;
  const bool fused = o.norm.active() || o.add_to_out || o.rope != nullptr;  // the register form's alone
  if (!fused && glu_f == 0 && !kGrouped && o.smem_ring && tensor_cores && PlanGemvFp8Mma(n, k, mt, o.num_sms, o.ring_bytes, &mma_plan)) {
    err = mt == 1   ? LaunchMma<T, TOut, 1>(x, w, sc, bias, out, m, n, k, mma_plan, o, stream)
          : mt == 2 ? LaunchMma<T, TOut, 2>(x, w, sc, bias, out, m, n, k, mma_plan, o, stream)
          : mt == 4 ? LaunchMma<T, TOut, 4>(x, w, sc, bias, out, m, n, k, mma_plan, o, stream)
                    : LaunchMma<T, TOut, 8>(x, w, sc, bias, out, m, n, k, mma_plan, o, stream);
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  GemvRingPlan plan;
  if (!fused && glu_f == 0 && o.smem_ring && PlanGemvRing(n, k, 1, mt, o.num_sms, o.ring_bytes, &plan, sizeof(T))) {
    err = mt == 1   ? LaunchRing<T, TOut, 1, kGrouped>(x, w, sc, bias, out, m, n, k, plan, o, stream)
          : mt == 2 ? LaunchRing<T, TOut, 2, kGrouped>(x, w, sc, bias, out, m, n, k, plan, o, stream)
          : mt == 4 ? LaunchRing<T, TOut, 4, kGrouped>(x, w, sc, bias, out, m, n, k, plan, o, stream)
                    : LaunchRing<T, TOut, 8, kGrouped>(x, w, sc, bias, out, m, n, k, plan, o, stream);
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  const int wpr = glu_f > 0 || o.rope != nullptr ? 1 : o.warps_per_row > 0 ? o.warps_per_row : AutoWarpsPerRow(n, k, o.num_sms);
  if (wpr != 1 && wpr != 2 && wpr != 4 && wpr != 8) return absl::InvalidArgumentError("GemvFp8: warps_per_row");
  err = mt == 1   ? LaunchRegister<T, TOut, 1, kGrouped>(x, w, sc, bias, out, m, n, k, wpr, glu_f, o, stream)
        : mt == 2 ? LaunchRegister<T, TOut, 2, kGrouped>(x, w, sc, bias, out, m, n, k, wpr, glu_f, o, stream)
        : mt == 4 ? LaunchRegister<T, TOut, 4, kGrouped>(x, w, sc, bias, out, m, n, k, wpr, glu_f, o, stream)
                  : LaunchRegister<T, TOut, 8, kGrouped>(x, w, sc, bias, out, m, n, k, wpr, glu_f, o, stream);
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const void* w, const Fp8WeightScales& s, const void* bias, void* out, int m,
                         int n, int k, const GemvOptions& o, bool tc, Stream stream) {
  const bool grouped = s.cols_per < k;
  const ScaleArgs sc{s.scale, static_cast<int>(std::min<int64_t>(s.rows_per, 0x7fffffff)), static_cast<int>(s.cols)};
  if (grouped) return LaunchRows<T, TOut, true>(x, w, sc, bias, out, m, n, k, o, tc, stream);
  return LaunchRows<T, TOut, false>(x, w, sc, bias, out, m, n, k, o, tc, stream);
}

}  // namespace

int GemvFp8AutoWarpsPerRow(int64_t n, int64_t k, int num_sms) { return AutoWarpsPerRow(n, k, num_sms); }

bool GemvFp8Supported(DType dtype, int64_t k, const Fp8WeightScales& s) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && k > 0 && k % kWVec == 0 && s.scale != nullptr &&
         s.rows_per >= 1 && (s.cols_per == kScaleGroup || s.cols_per >= k) && s.cols >= 1;
}

bool GemvFp8RingFits(DType dtype, int64_t m, int64_t n, int64_t k, size_t ring_bytes, int num_sms) {
  GemvRingPlan plan;
  return m >= 1 && m <= kGemvMaxRows && n <= 0x7fffffff && k <= 0x7fffffff &&
         PlanGemvRing(n, k, 1, RingRowsTemplate(m), num_sms, ring_bytes, &plan, static_cast<int>(DTypeSize(dtype)));
}

bool GemvFp8MmaFits(DType dtype, int64_t m, int64_t n, int64_t k, const Fp8WeightScales& scales, size_t ring_bytes,
                    int num_sms) {
  GemvFp8MmaPlan plan;
  return m >= 1 && m <= kGemvMaxRows && GemvFp8Supported(dtype, k, scales) && scales.cols_per >= k &&
         PlanGemvFp8Mma(n, k, RingRowsTemplate(m), num_sms, ring_bytes, &plan);
}

absl::Status LaunchGemvFp8(DType dtype, DType out_dtype, const void* x, const void* w, const Fp8WeightScales& scales,
                           const void* bias, void* out, int64_t m, int64_t n, int64_t k, const GemvOptions& options,
                           Stream stream, bool tensor_cores) {
  if (m < 0 || m > kGemvMaxRows || n <= 0 || n > 0x7fffffff || k > 0x7fffffff || !GemvFp8Supported(dtype, k, scales))
    return absl::InvalidArgumentError(absl::StrCat("GemvFp8: unsupported shape m ", m, " n ", n, " k ", k,
                                                   " or scales (", scales.rows_per, " rows x ", scales.cols_per,
                                                   " columns a scale)"));
  if (!Aligned16(x) || !Aligned16(w))
    return absl::InvalidArgumentError("GemvFp8: x and w must be 16-byte aligned");
  if (options.glu_cols != 0 && (!GemvGluTakes(options.glu_cols, n, k) || out_dtype != dtype))
    return absl::InvalidArgumentError(absl::StrCat("GemvFp8: the gate/up form takes N = 2F with F a multiple of 4 and "
                                                   "an output in the input dtype (N ", n, ", F ", options.glu_cols, ")"));
  if (m > 0 && (options.norm.active() || options.add_to_out) &&
      (out_dtype != dtype || tensor_cores || options.smem_ring || (options.add_to_out && options.glu_cols != 0) ||
       (options.norm.active() && (!GemvNormTakes(m, k, DTypeSize(dtype)) || !Aligned16(options.norm.weight)))))
    return absl::InvalidArgumentError(absl::StrCat("GemvFp8: a fused norm or residual add takes the register form, an "
                                                   "output in the input dtype, no gate/up form with the add, and for "
                                                   "the norm an aligned weight and m * K of at most ",
                                                   kGemvNormMaxBytes, " bytes (m ", m, ", K ", k, ")"));
  if (options.rope != nullptr &&
      (!GemvRopeTakes(n, *options.rope) || out_dtype != dtype || options.glu_cols != 0 || options.add_to_out ||
       tensor_cores || options.smem_ring || (options.warps_per_row != 0 && options.warps_per_row != 1) ||
       options.rope->num_tokens < m))
    return absl::InvalidArgumentError(absl::StrCat("GemvFp8: the QKV-RoPE end takes the register form, one warp a "
                                                   "row, no q/k norms and whole rotated heads (N ", n, ")"));
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (dtype == DType::kBF16) {
    if (out_dtype == DType::kBF16)
      return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(x, w, scales, bias, out, mi, ni, ki, options, tensor_cores, stream);
    if (out_dtype == DType::kF32)
      return LaunchTyped<__nv_bfloat16, float>(x, w, scales, bias, out, mi, ni, ki, options, tensor_cores, stream);
  } else {
    if (out_dtype == DType::kF16)
      return LaunchTyped<__half, __half>(x, w, scales, bias, out, mi, ni, ki, options, tensor_cores, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__half, float>(x, w, scales, bias, out, mi, ni, ki, options, tensor_cores, stream);
  }
  return absl::InvalidArgumentError("GemvFp8: output dtype must be the input dtype or float32");
}

}  // namespace llm::cuda
