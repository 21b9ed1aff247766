#include "kernels/cuda/rope/qkv_rope.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;  // heads per block: one warp each
constexpr int kMaxHeadDim = 512;

// grid: (tokens, ceil((H + 2 KVH) / kWarps)); warp w of block (t, g) handles head g * kWarps + w
// of token t: q heads, then k heads, then v heads. Shared memory: cos/sin [rotary_dim/2] and
// one head buffer per warp [head_dim] floats (the rotation pairs elements of different lanes).
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) QkvRopeKernel(QkvRopeParams p) {
  AllowDependentLaunch();
  GridDependencyWait();
  extern __shared__ float smem[];
  const int d = p.head_dim, half = p.rotary_dim / 2;
  float* cos_s = smem;         // [half]
  float* sin_s = smem + half;  // [half]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* buf = smem + 2 * half + warp * d;  // [d]

  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);  // accurate sincos: matches the float32 reference
    cos_s[i] = c * p.attention_scaling;
    sin_s[i] = s * p.attention_scaling;
  }
  __syncthreads();

  const int heads = p.num_heads, kv_heads = p.num_kv_heads;
  const int hh = blockIdx.y * kWarps + warp;
  if (hh >= heads + 2 * kv_heads) return;
  const int32_t slot = p.slot_mapping[t];
  const bool is_q = hh < heads, is_k = !is_q && hh < heads + kv_heads;
  if (!is_q && slot < 0) return;  // K/V of a token whose write is skipped
  const T* src = static_cast<const T*>(p.qkv) + t * static_cast<int64_t>(heads + 2 * kv_heads) * d +
                 static_cast<int64_t>(hh) * d;
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(p.q_out) + (t * heads + hh) * d;
  } else {
    const int64_t block = slot / p.block_size, offset = slot % p.block_size;
    const int h = is_k ? hh - heads : hh - heads - kv_heads;
    T* cache = static_cast<T*>(is_k ? p.k_cache : p.v_cache);
    dst = cache + ((block * kv_heads + h) * p.block_size + offset) * d;
  }
  if (!is_q && !is_k) {  // V: plain copy
    for (int i = lane; i < d; i += 32) dst[i] = src[i];
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
      o = buf[i] * cos_s[i] - buf[i + half] * sin_s[i];
    } else if (i < 2 * half) {
      const int j = i - half;
      o = buf[i] * cos_s[j] + buf[j] * sin_s[j];
    } else {
      o = buf[i];
    }
    dst[i] = FromFloat<T>(o);
  }
}

}  // namespace

absl::Status LaunchQkvRope(DType dtype, const QkvRopeParams& p, Stream stream, bool pdl) {
  if (p.num_tokens < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim > kMaxHeadDim || p.rotary_dim < 0 || p.rotary_dim > p.head_dim || p.rotary_dim % 2 != 0 ||
      p.block_size <= 0)
    return absl::InvalidArgumentError(absl::StrCat("QkvRope: bad sizes (head_dim ", p.head_dim, ", rotary_dim ",
                                                   p.rotary_dim, ")"));
  if (p.num_tokens == 0) return absl::OkStatus();
  if (p.num_tokens > 0x7fffffff) return absl::InvalidArgumentError("QkvRope: too many tokens");
  const size_t smem = (static_cast<size_t>(p.rotary_dim) + kWarps * p.head_dim) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), (p.num_heads + 2 * p.num_kv_heads + kWarps - 1) / kWarps);
  if (grid.y > 65535) return absl::InvalidArgumentError("QkvRope: too many heads");
  return LLM_DISPATCH_FLOAT(dtype, "QkvRope", [&] {
    CUDA_RETURN_IF_ERROR(LaunchKernel(QkvRopeKernel<scalar_t>, grid, dim3(kWarps * 32), smem, stream, pdl, p));
    return absl::OkStatus();
  });
}

}  // namespace llm::cuda
