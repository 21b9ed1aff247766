#include "kernels/cuda/elementwise/elementwise.h"

#include "kernels/core/philox.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/quant/fp8_row_quantize.cuh"

namespace llm::cuda {

// A byte destination of the random fill: the draw truncated to an integer (int4 dummy codes:
// low 0, high 256), as the host's default Backend::FillUniform does.
struct TruncatedByte {
  uint8_t bits;
};
template <>
__device__ __forceinline__ TruncatedByte FromFloat<TruncatedByte>(float x) {
  return {static_cast<uint8_t>(fminf(fmaxf(x, 0.0f), 255.0f))};
}

namespace {

constexpr int kThreads = 256;
// Rows from which SiLU-and-mul with an FP8 output gives each thread more of its row.
constexpr int64_t kManyRows = 128;

int GridFor(int64_t items) {
  // Grid-stride loops: enough blocks to fill the GPU a few times over, no more.
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <typename T>
__global__ void AddKernel(T* __restrict__ x, const T* __restrict__ y, int64_t n, bool vec) {
  AllowDependentLaunch();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vec) {  // n % kVec == 0, both pointers 16-byte aligned
    constexpr int kVec = Vec16<T>::kVec;
    for (; i < n / kVec; i += stride) {
      Vec16<T> a = LoadVec(x + i * kVec);
      const Vec16<T> b = LoadVec(y + i * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) a.v[e] = FromFloat<T>(ToFloat(a.v[e]) + ToFloat(b.v[e]));
      StoreVec(x + i * kVec, a);
    }
  } else {
    for (; i < n; i += stride) x[i] = FromFloat<T>(ToFloat(x[i]) + ToFloat(y[i]));
  }
}

template <typename T>
__global__ void SiluMulKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows, int64_t f,
                              bool vec) {
  AllowDependentLaunch();
  GridDependencyWait();
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vec) {  // f % kVec == 0, aligned
    constexpr int kVec = Vec16<T>::kVec;
    const int64_t per_row = f / kVec;
    for (; i < rows * per_row; i += stride) {
      const int64_t r = i / per_row, c = (i % per_row) * kVec;
      const Vec16<T> g = LoadVec(gate_up + r * 2 * f + c);
      const Vec16<T> u = LoadVec(gate_up + r * 2 * f + f + c);
      Vec16<T> o;
#pragma unroll
      for (int e = 0; e < kVec; ++e) o.v[e] = FromFloat<T>(SiluFor<T>(ToFloat(g.v[e])) * ToFloat(u.v[e]));
      StoreVec(out + r * f + c, o);
    }
  } else {
    for (; i < rows * f; i += stride) {
      const int64_t r = i / f, c = i % f;
      out[i] = FromFloat<T>(SiluFor<T>(ToFloat(gate_up[r * 2 * f + c])) * ToFloat(gate_up[r * 2 * f + f + c]));
    }
  }
}

// One block per row, element by element: the row's SiLU-and-mul stored (as SiluMulKernel rounds
// it), then quantized from the stored values by the same threads (QuantizeStoredRowFp8's walk).
// For the rows SiluMulFp8HeldKernel does not take (unaligned, or past 8 x 1024 16-byte chunks).
template <typename T>
__global__ void SiluMulFp8Kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t f,
                                 Fp8RowOutput quantized) {
  AllowDependentLaunch();
  GridDependencyWait();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* g = gate_up + row * 2 * f;
  const T* u = g + f;
  T* o = out + row * f;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) o[c] = FromFloat<T>(SiluFor<T>(ToFloat(g[c])) * ToFloat(u[c]));
  QuantizeStoredRowFp8<T, false>(o, row, f, quantized, scratch);
}

// The same with the row held in registers: each thread loads all its chunks of gate and up
// (chunk threadIdx.x + j * blockDim.x, every load in flight before the first use), stores the
// rounded products (unless quantized.values_unused) and quantizes them from its registers. Same
// values, codes and scales as SiluMulFp8Kernel; f % kVec == 0, aligned.
template <typename T, int kChunks>
__global__ void SiluMulFp8HeldKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t f,
                                     Fp8RowOutput quantized) {
  AllowDependentLaunch();
  GridDependencyWait();
  __shared__ float scratch[32];
  constexpr int kVec = Vec16<T>::kVec;
  const int64_t row = blockIdx.x, vecs = f / kVec;
  const T* g = gate_up + row * 2 * f;
  const T* u = g + f;
  T* o = out + row * f;
  Vec16<T> gv[kChunks], uv[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c < vecs) gv[j] = LoadVec(g + c * kVec), uv[j] = LoadVec(u + c * kVec);
  }
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c < vecs) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) gv[j].v[e] = FromFloat<T>(SiluFor<T>(ToFloat(gv[j].v[e])) * ToFloat(uv[j].v[e]));
      if (!quantized.values_unused) StoreVec(o + c * kVec, gv[j]);
    }
  }
  QuantizeHeldRowFp8<T, kChunks>(gv, row, f, quantized, scratch);
}

template <typename T, typename TOut>
__global__ void AddBiasKernel(TOut* __restrict__ out, const T* __restrict__ bias, int64_t rows, int64_t cols) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows * cols; i += stride)
    out[i] = FromFloat<TOut>(ToFloat(out[i]) + ToFloat(bias[i % cols]));
}

template <typename S, typename D>
__global__ void ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = FromFloat<D>(ToFloat(src[i]));
}

template <typename T>
__global__ void FillUniformKernel(T* __restrict__ dst, int64_t n, uint64_t seed, float low, float scale) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = FromFloat<T>(low + scale * UniformFloat(seed, static_cast<uint64_t>(i)));
}

__global__ void FillPatternKernel(uint32_t* __restrict__ dst, int64_t n, uint32_t pattern) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = pattern;
}

bool IsFloating(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace

absl::Status LaunchAdd(DType dtype, void* x, const void* y, int64_t n, Stream stream) {
  if (n < 0) return absl::InvalidArgumentError("Add: negative size");
  if (n == 0) return absl::OkStatus();
  return LLM_DISPATCH_FLOAT(dtype, "Add", [&] {
    constexpr int kVec = Vec16<scalar_t>::kVec;
    const bool vec = n % kVec == 0 && Aligned16(x) && Aligned16(y);
    AddKernel<scalar_t><<<GridFor(vec ? n / kVec : n), kThreads, 0, stream>>>(
        static_cast<scalar_t*>(x), static_cast<const scalar_t*>(y), n, vec);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  });
}

absl::Status LaunchSiluMul(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f, Stream stream,
                           bool pdl) {
  if (rows < 0 || f < 0) return absl::InvalidArgumentError("SiluMul: negative size");
  if (rows == 0 || f == 0) return absl::OkStatus();
  return LLM_DISPATCH_FLOAT(dtype, "SiluMul", [&] {
    constexpr int kVec = Vec16<scalar_t>::kVec;
    const bool vec = f % kVec == 0 && Aligned16(gate_up) && Aligned16(out);
    CUDA_RETURN_IF_ERROR(LaunchKernel(SiluMulKernel<scalar_t>, dim3(GridFor(vec ? rows * f / kVec : rows * f)),
                                      dim3(kThreads), 0, stream, pdl, static_cast<const scalar_t*>(gate_up),
                                      static_cast<scalar_t*>(out), rows, f, vec));
    return absl::OkStatus();
  });
}

absl::Status LaunchSiluMulFp8(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f,
                              const Fp8RowOutput& quantized, Stream stream, bool pdl) {
  if (rows < 0 || f < 0 || rows > 0x7fffffff) return absl::InvalidArgumentError("SiluMulFp8: bad sizes");
  if (!quantized.complete())
    return absl::InvalidArgumentError("SiluMulFp8: FP8 output needs codes and either per-row or static scales");
  if (rows == 0 || f == 0) return absl::OkStatus();
  return LLM_DISPATCH_FLOAT(dtype, "SiluMulFp8", [&] {
    constexpr int kVec = Vec16<scalar_t>::kVec;
    const bool vec = f % kVec == 0 && Aligned16(gate_up) && Aligned16(out) &&
                     reinterpret_cast<uintptr_t>(quantized.codes) % 8 == 0;
    const int64_t work = vec ? f / kVec : f;
    // The row held in registers (SiluMulFp8HeldKernel), at least two 16-byte chunks of gate and of
    // up a thread (so the 8B MLP's 1,792 chunks a row take 896 threads), from kManyRows rows at
    // least four (448 threads: more blocks an SM, which hide the exponentials and divisions better
    // when every SM has several rows). By measurement on an H100 (benchmarks/RESULTS.md): the FP8
    // prefill's SiLU-and-mul 3.5 -> 2.5 ms against the store-then-reread kernel, batch 32 0.28 ->
    // 0.27 ms with two chunks (four: 0.31). Rows past 8 x 1024 chunks take the element-wise kernel.
    const int min_chunks = rows >= kManyRows ? 4 : 2;
    int chunks = 0;
    for (const int c : {2, 4, 8}) {
      if (vec && c >= min_chunks && work <= c * 1024) {
        chunks = c;
        break;
      }
    }
    const int64_t per_thread = chunks > 0 ? chunks : 1;
    const int threads = static_cast<int>(
        std::min<int64_t>(1024, std::max<int64_t>(32, ((work + per_thread - 1) / per_thread + 31) / 32 * 32)));
    auto kernel = chunks == 2   ? SiluMulFp8HeldKernel<scalar_t, 2>
                  : chunks == 4 ? SiluMulFp8HeldKernel<scalar_t, 4>
                  : chunks == 8 ? SiluMulFp8HeldKernel<scalar_t, 8>
                                : SiluMulFp8Kernel<scalar_t>;
    CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream, pdl,
                                      static_cast<const scalar_t*>(gate_up), static_cast<scalar_t*>(out), f,
                                      quantized));
    return absl::OkStatus();
  });
}

absl::Status LaunchAddBias(DType dtype, DType out_dtype, void* out, const void* bias, int64_t rows, int64_t cols,
                           Stream stream) {
  if (rows <= 0 || cols <= 0) return absl::OkStatus();
  if (out_dtype != dtype && out_dtype != DType::kF32)
    return absl::InvalidArgumentError("AddBias: output must be the bias dtype or float32");
  return LLM_DISPATCH_FLOAT(dtype, "AddBias", [&] {
    using T = scalar_t;
    if (out_dtype == DType::kF32)
      AddBiasKernel<T, float><<<GridFor(rows * cols), kThreads, 0, stream>>>(static_cast<float*>(out),
                                                                             static_cast<const T*>(bias), rows, cols);
    else
      AddBiasKernel<T, T><<<GridFor(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(out),
                                                                         static_cast<const T*>(bias), rows, cols);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  });
}

absl::Status LaunchConvert(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n, Stream stream) {
  if (!IsFloating(src_dtype) || !(IsFloating(dst_dtype) || dst_dtype == DType::kF8E4M3))
    return absl::InvalidArgumentError("Convert: floating dtypes only");
  if (n <= 0) return absl::OkStatus();
  if (dst_dtype == DType::kF8E4M3) {  // rounds to nearest even, saturating (dummy FP8 weights)
    return LLM_DISPATCH_FLOAT(src_dtype, "Convert", [&] {
      ConvertKernel<scalar_t, Fp8E4M3Byte><<<GridFor(n), kThreads, 0, stream>>>(static_cast<const scalar_t*>(src),
                                                                                static_cast<Fp8E4M3Byte*>(dst), n);
      CUDA_RETURN_IF_LAUNCH_ERROR();
      return absl::OkStatus();
    });
  }
  return LLM_DISPATCH_FLOAT(src_dtype, "Convert", [&] {
    using S = scalar_t;
    return LLM_DISPATCH_FLOAT(dst_dtype, "Convert", [&] {
      ConvertKernel<S, scalar_t><<<GridFor(n), kThreads, 0, stream>>>(static_cast<const S*>(src),
                                                                      static_cast<scalar_t*>(dst), n);
      CUDA_RETURN_IF_LAUNCH_ERROR();
      return absl::OkStatus();
    });
  });
}

absl::Status LaunchFillUniform(DType dtype, void* dst, int64_t n, uint64_t seed, float low, float high,
                               Stream stream) {
  if (n <= 0) return absl::OkStatus();
  if (dtype == DType::kU8) {
    FillUniformKernel<TruncatedByte><<<GridFor(n), kThreads, 0, stream>>>(static_cast<TruncatedByte*>(dst), n, seed,
                                                                          low, high - low);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  }
  if (dtype == DType::kF8E4M3) {
    FillUniformKernel<Fp8E4M3Byte><<<GridFor(n), kThreads, 0, stream>>>(static_cast<Fp8E4M3Byte*>(dst), n, seed, low,
                                                                        high - low);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  }
  return LLM_DISPATCH_FLOAT(dtype, "FillUniform", [&] {
    FillUniformKernel<scalar_t><<<GridFor(n), kThreads, 0, stream>>>(static_cast<scalar_t*>(dst), n, seed, low,
                                                                     high - low);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  });
}

absl::Status LaunchFillPattern(void* dst, int64_t bytes, uint32_t pattern, Stream stream) {
  if (bytes % 4 != 0) return absl::InvalidArgumentError("FillPattern: size must be a multiple of 4 bytes");
  if (bytes <= 0) return absl::OkStatus();
  FillPatternKernel<<<GridFor(bytes / 4), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), bytes / 4, pattern);
  CUDA_RETURN_IF_LAUNCH_ERROR();
  return absl::OkStatus();
}

}  // namespace llm::cuda
