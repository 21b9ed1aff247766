#include <type_traits>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/quant/fp8_gemm_scales.cuh"
#include "kernels/cuda/rope/qkv_rope.h"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;  // heads per block: one warp each
constexpr int kMaxHeadDim = 512;

// cos/sin of token t's position times each frequency, times the attention scaling, into shared
// memory (the whole block calls it; it ends with a barrier).
__device__ __forceinline__ void TokenCosSin(const QkvRopeParams& p, int64_t t, int half, float* cos_s, float* sin_s) {
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);  // accurate sincos: matches the float32 reference
    cos_s[i] = c * p.attention_scaling;
    sin_s[i] = s * p.attention_scaling;
  }
  __syncthreads();
}

// grid: (tokens, ceil((H + 2 KVH) / kWarps)); warp w of block (t, g) handles head g * kWarps + w
// of token t: q heads, then k heads, then v heads. Shared memory: cos/sin [rotary_dim/2] and
// one head buffer per warp [head_dim] floats (the rotation pairs elements of different lanes).
template <typename T, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) QkvRopeKernel(QkvRopeParams p) {
  AllowDependentLaunch();
  extern __shared__ float smem[];
  const int d = p.head_dim, half = p.rotary_dim / 2;
  float* cos_s = smem;         // [half]
  float* sin_s = smem + half;  // [half]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* buf = smem + 2 * half + warp * d;  // [d]

  const int64_t t = blockIdx.x;
  TokenCosSin(p, t, half, cos_s, sin_s);  // before the wait: see QkvRopeFullKernel
  GridDependencyWait();

  const int heads = p.num_heads, kv_heads = p.num_kv_heads;
  const int hh = blockIdx.y * kWarps + warp;
  if (hh >= heads + 2 * kv_heads) return;
  const int32_t slot = p.slot_mapping[t];
  const bool is_q = hh < heads, is_k = !is_q && hh < heads + kv_heads;
  if (!is_q && slot < 0) return;  // K/V of a token whose write is skipped
  const T* src = static_cast<const T*>(p.qkv) + t * static_cast<int64_t>(heads + 2 * kv_heads) * d +
                 static_cast<int64_t>(hh) * d;
  int64_t at;  // element offset of the destination row
  void* base;
  if (is_q) {
    base = p.q_out;
    at = (t * heads + hh) * d;
  } else {
    const int64_t block = slot / p.block_size, offset = slot % p.block_size;
    const int h = is_k ? hh - heads : hh - heads - kv_heads;
    base = is_k ? p.k_cache : p.v_cache;
    at = ((block * kv_heads + h) * p.block_size + offset) * d;
  }
  const float cache_scale = is_k ? p.k_scale : p.v_scale;
  auto put = [&](int i, float v) {
    if (kFp8 && !is_q) static_cast<uint8_t*>(base)[at + i] = FloatToFp8(v / cache_scale);
    else static_cast<T*>(base)[at + i] = FromFloat<T>(v);
  };
  if (!is_q && !is_k) {  // V: a copy (exact in the 16-bit cache)
    for (int i = lane; i < d; i += 32) put(i, ToFloat(src[i]));
    return;
  }
  const T* norm_w = static_cast<const T*>(is_q ? p.q_norm : p.k_norm);
  float sum_sq = 0.0f;
  for (int i = lane; i < d; i += 32) {
    const float v = ToFloat(src[i]);
    buf[i] = v;
    sum_sq += v * v;
  }
  float inv = 1.0f;
  if (norm_w) inv = rsqrtf(WarpSum(sum_sq) / static_cast<float>(d) + p.norm_eps);
  __syncwarp();
  if (norm_w)
    for (int i = lane; i < d; i += 32) buf[i] = ToFloat(norm_w[i]) * (buf[i] * inv);
  __syncwarp();
  for (int i = lane; i < d; i += 32) {
    float o;
    if (i < half) {
      o = __fsub_rn(__fmul_rn(buf[i], cos_s[i]), __fmul_rn(buf[i + half], sin_s[i]));
    } else if (i < 2 * half) {
      const int j = i - half;
      o = __fadd_rn(__fmul_rn(buf[i], cos_s[j]), __fmul_rn(buf[j], sin_s[j]));
    } else {
      o = buf[i];
    }
    put(i, o);
  }
}

// The common shape (head_dim 64 or 128, rotary over all of it). grid: (tokens, head groups): a
// block computes its token's cos/sin and its 8 warps take the group's heads in turn (one group of
// all heads for long prefills, so that cos/sin are computed once a token; a group per 8 heads for
// decode steps, where latency counts and the blocks are few); each lane holds E = head_dim / 32
// consecutive elements (one 4- or 8-byte access), and element i's rotation partner i +- half sits
// in lane ^ 16 at the same place (a shuffle instead of a round trip through shared memory). The
// arithmetic is the general kernel's, in the same order.
template <typename T, int E, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) QkvRopeFullKernel(QkvRopeParams p) {
  static_assert(E == 2 || E == 4, "head_dim 64 or 128");
  using Chunk = std::conditional_t<E == 4, uint2, uint32_t>;
  using Fp8Chunk = std::conditional_t<E == 4, uint32_t, uint16_t>;  // E E4M3 bytes
  constexpr int kD = 32 * E, kHalf = kD / 2;
  AllowDependentLaunch();
  __shared__ float cos_s[kHalf], sin_s[kHalf];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  // The step's positions and slots are uploaded before its first kernel, and no kernel writes them
  // or the frequencies: the sines and the slot are formed while the QKV projection ends.
  TokenCosSin(p, t, kHalf, cos_s, sin_s);
  const int heads = p.num_heads, kv_heads = p.num_kv_heads;
  const int32_t slot = p.slot_mapping[t];
  GridDependencyWait();
  const int64_t page = slot >= 0 ? slot / p.block_size : 0, offset = slot >= 0 ? slot % p.block_size : 0;
  for (int hh = blockIdx.y * kWarps + warp; hh < heads + 2 * kv_heads; hh += kWarps * gridDim.y) {
    const bool is_q = hh < heads, is_k = !is_q && hh < heads + kv_heads;
    if (!is_q && slot < 0) continue;  // K/V of a token whose write is skipped
    const T* src = static_cast<const T*>(p.qkv) + (t * (heads + 2 * kv_heads) + hh) * kD + lane * E;
    int64_t at;  // element offset of this lane's E destination elements
    void* base;
    if (is_q) {
      base = p.q_out;
      at = (t * heads + hh) * kD + lane * E;
    } else {
      const int h = is_k ? hh - heads : hh - heads - kv_heads;
      base = is_k ? p.k_cache : p.v_cache;
      at = ((page * kv_heads + h) * p.block_size + offset) * kD + lane * E;
    }
    // The cache's E values: E4M3 bytes of value / scale, or the 16-bit values themselves.
    auto put_fp8 = [&](const float* v, float scale) {
      Fp8Chunk c;
      uint8_t* b = reinterpret_cast<uint8_t*>(&c);
#pragma unroll
      for (int e = 0; e < E; ++e) b[e] = FloatToFp8(v[e] / scale);
      *reinterpret_cast<Fp8Chunk*>(static_cast<uint8_t*>(base) + at) = c;
    };
    Chunk in;
    if (p.pending.active()) {  // the projection's values from its raw sums (fp8_gemm_scales.cuh)
      const int64_t col = hh * kD + lane * E;
      const float* sums = p.pending.sums + t * (heads + 2 * kv_heads) * kD + col;
      float s[E];
      if constexpr (E == 4) {
        const float4 v = *reinterpret_cast<const float4*>(sums);
        s[0] = v.x, s[1] = v.y, s[2] = v.z, s[3] = v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(sums);
        s[0] = v.x, s[1] = v.y;
      }
      const float xs = PendingXScale(p.pending, t);
      T* ie = reinterpret_cast<T*>(&in);
#pragma unroll
      for (int e = 0; e < E; ++e)
        ie[e] =
            ScaledFp8Sum<T>(s[e], xs, PendingWScale(p.pending, col + e), PendingBias<T>(p.pending, col + e));
    } else {
      in = *reinterpret_cast<const Chunk*>(src);
    }
    if (!is_q && !is_k) {  // V: a copy (exact in the 16-bit cache)
      if constexpr (kFp8) {
        const T* ve = reinterpret_cast<const T*>(&in);
        float v[E];
#pragma unroll
        for (int e = 0; e < E; ++e) v[e] = ToFloat(ve[e]);
        put_fp8(v, p.v_scale);
      } else {
        *reinterpret_cast<Chunk*>(static_cast<T*>(base) + at) = in;
      }
      continue;
    }
    const T* xe = reinterpret_cast<const T*>(&in);
    float x[E];
    float sum_sq = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      x[e] = ToFloat(xe[e]);
      sum_sq += x[e] * x[e];
    }
    const T* norm_w = static_cast<const T*>(is_q ? p.q_norm : p.k_norm);
    if (norm_w) {
      const float inv = rsqrtf(WarpSum(sum_sq) / static_cast<float>(kD) + p.norm_eps);
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = ToFloat(norm_w[lane * E + e]) * (x[e] * inv);
    }
    float rotated[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float partner = __shfl_xor_sync(0xffffffffu, x[e], 16);
      const int i = lane * E + e;
      // Rounded product by product (no contraction), as the CPU oracle and the GEMV's fused end
      // (qkv_rope_epilogue.cuh) compute it.
      rotated[e] = lane < 16 ? __fsub_rn(__fmul_rn(x[e], cos_s[i]), __fmul_rn(partner, sin_s[i]))
                             : __fadd_rn(__fmul_rn(x[e], cos_s[i - kHalf]), __fmul_rn(partner, sin_s[i - kHalf]));
    }
    if (kFp8 && is_k) {
      put_fp8(rotated, p.k_scale);
      continue;
    }
    Chunk out;
    T* oe = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < E; ++e) oe[e] = FromFloat<T>(rotated[e]);
    *reinterpret_cast<Chunk*>(static_cast<T*>(base) + at) = out;
  }
}

// The full kernel's shape and output alignment (QkvRopeFullKernel; its input: Aligned8(qkv), or
// pending sums 16-byte aligned).
bool FullKernelTakes(const QkvRopeParams& p) {
  return (p.head_dim == 64 || p.head_dim == 128) && p.rotary_dim == p.head_dim && Aligned8(p.q_out) &&
         Aligned8(p.k_cache) && Aligned8(p.v_cache);
}
}  // namespace

bool QkvRopeTakesPendingScales(const QkvRopeParams& p) {
  return p.pending.active() && FullKernelTakes(p) && reinterpret_cast<uintptr_t>(p.pending.sums) % 16 == 0;
}

absl::Status LaunchQkvRope(DType dtype, const QkvRopeParams& p, Stream stream, bool pdl) {
  if (p.num_tokens < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim > kMaxHeadDim || p.rotary_dim < 0 || p.rotary_dim > p.head_dim || p.rotary_dim % 2 != 0 ||
      p.block_size <= 0)
    return absl::InvalidArgumentError(absl::StrCat("QkvRope: bad sizes (head_dim ", p.head_dim, ", rotary_dim ",
                                                   p.rotary_dim, ")"));
  if (p.num_tokens == 0) return absl::OkStatus();
  if (p.num_tokens > 0x7fffffff) return absl::InvalidArgumentError("QkvRope: too many tokens");
  if (p.fp8_cache && (dtype == DType::kF32 || !(p.k_scale > 0.0f) || !(p.v_scale > 0.0f)))
    return absl::InvalidArgumentError("QkvRope: an FP8 cache needs 16-bit activations and positive scales");
  const size_t smem = (static_cast<size_t>(p.rotary_dim) + kWarps * p.head_dim) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), (p.num_heads + 2 * p.num_kv_heads + kWarps - 1) / kWarps);
  if (grid.y > 65535) return absl::InvalidArgumentError("QkvRope: too many heads");
  const bool full = FullKernelTakes(p) && dtype != DType::kF32 && (p.pending.active() || Aligned8(p.qkv));
  if (p.pending.active() && (!full || !QkvRopeTakesPendingScales(p) || p.pending.x_scale == nullptr ||
                             p.pending.w_scale == nullptr))
    return absl::InvalidArgumentError(
        "QkvRope: pending scales need head_dim 64 or 128, full rotary, 16-bit "
        "activations and aligned operands");
  if (full) {
    // Fewer tokens than would keep the GPU busy (decode steps): a group per 8 heads.
    const dim3 full_grid(grid.x, p.num_tokens >= 256 ? 1u : grid.y);
    auto launch = [&](auto kernel) -> absl::Status {
      CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, full_grid, dim3(kWarps * 32), 0, stream, pdl, p));
      return absl::OkStatus();
    };
    auto typed = [&](auto tag) -> absl::Status {
      using T = decltype(tag);
      if (p.fp8_cache)
        return p.head_dim == 128 ? launch(QkvRopeFullKernel<T, 4, true>) : launch(QkvRopeFullKernel<T, 2, true>);
      return p.head_dim == 128 ? launch(QkvRopeFullKernel<T, 4, false>) : launch(QkvRopeFullKernel<T, 2, false>);
    };
    if (dtype == DType::kBF16) return typed(__nv_bfloat16{});
    return typed(__half{});
  }
  return LLM_DISPATCH_FLOAT(dtype, "QkvRope", [&] {
    auto kernel = p.fp8_cache ? QkvRopeKernel<scalar_t, true> : QkvRopeKernel<scalar_t, false>;
    CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, grid, dim3(kWarps * 32), smem, stream, pdl, p));
    return absl::OkStatus();
  });
}

}  // namespace llm::cuda
