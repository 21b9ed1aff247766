// The FP8 paths of the CUDA backend against the CPU oracle's emulation of the same arithmetic:
//  - Linear with E4M3 weights at every scale granularity (tensor, channel, 128 x 128 blocks, row
//    groups of 128), every input quantization, many shapes, each kernel form (GEMV registers and
//    rings, the few-rows GEMM, cuBLASLt W8A8 in one or several row chunks, the dequantizing GEMM),
//    eagerly and replayed from a CUDA graph. The GEMV, the few-rows GEMM and the dequantizing GEMM
//    keep x in 16 bits (W8A16): they are held to the CPU on the dequantized weights; the cuBLASLt path quantizes x as the weight
//    declares (W8A8): it is held to the CPU backend's emulation of that (emulate_fp8_activations).
//    Which kernel ran is read from the op timing's label.
//  - The FP8 KV cache: QkvRope's writes (V bytes exactly the CPU's, K within one E4M3 step) and
//    paged attention over an E4M3 cache in the decode, prefill and SIMT kernels, split or not.
//  - The FP8 fixtures teacher-forced on the GPU (bf16), with and without an FP8 KV cache, held to
//    the CPU emulation of a bf16 W8A8 engine, and FP8 dummy weights drawn on the GPU against the
//    host's draw.
// Without a GPU the binary exits 77 (skipped).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <numeric>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"
#include "kernels/core/fp8_scale.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/quant/fp8_quantize.h"
#include "kernels/cuda/rope/qkv_rope.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/rounding_backend.h"

namespace llm {
namespace {

using testing::Download;
using testing::MakeTensor;
using testing::OwnedTensor;
using testing::Poison;
using testing::RaggedDecodes;
using testing::RandomVec;
using testing::RelErr;
using testing::RoundTo;
using testing::Tolerance;
using testing::Upload;
using testing::UploadI32;

// E4M3 weights of `format` quantized from float values: each scale is its cell's amax / 448.
struct Fp8Weight {
  StorageFormat format;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  ScaleGrid grid;
};

Fp8Weight Quantize(const std::vector<float>& w, int64_t n, int64_t k, StorageFormat format) {
  Fp8Weight q;
  q.format = format;
  q.grid = ScaleGridFor(format, n, k);
  std::vector<float> amax(q.grid.numel(), 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) amax[q.grid.Index(r, c)] = std::max(amax[q.grid.Index(r, c)], std::abs(w[r * k + c]));
  for (float a : amax) q.scales.push_back(Fp8ScaleForAmax(a));
  q.bytes.resize(w.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) q.bytes[r * k + c] = FloatToFp8E4M3(w[r * k + c] / q.scales[q.grid.Index(r, c)]);
  return q;
}

// The weight's tensors on one backend (the bias in `act`).
struct DeviceLinear {
  OwnedTensor weight, scale, bias, input_scale;
  LinearWeight lw;
};

DeviceLinear Place(Backend& b, DType act, const Fp8Weight& q, int64_t n, int64_t k, const std::vector<float>& bias,
                   ActivationQuant input_quant, float input_scale) {
  DeviceLinear d;
  d.weight = MakeTensor(b, DType::kF8E4M3, {n, k});
  EXPECT_TRUE(b.CopyToDevice(d.weight.t, q.bytes.data()).ok());
  d.scale = Upload(b, DType::kF32, {q.grid.rows, q.grid.cols}, q.scales);
  d.lw.weight = d.weight.t;
  d.lw.format = q.format;
  d.lw.scale = d.scale.t;
  if (!bias.empty()) {
    d.bias = Upload(b, act, {n}, bias);
    d.lw.bias = d.bias.t;
  }
  d.lw.input_quant = input_quant;
  d.lw.input_group = input_quant == ActivationQuant::kDynamicPerGroup ? 128 : 0;
  if (input_quant == ActivationQuant::kStaticPerTensor) {
    d.input_scale = Upload(b, DType::kF32, {1}, {input_scale});
    d.lw.input_scale = d.input_scale.t;
  }
  EXPECT_TRUE(b.Synchronize().ok());
  return d;
}

class CudaFp8Test : public testing::CudaAgainstCpuTest {
 protected:
  CudaFp8Test() : CudaAgainstCpuTest(4321) {}
  void SetUp() override {
    CudaAgainstCpuTest::SetUp();
    if (HasFatalFailure()) return;
    CpuBackendOptions emulate;
    emulate.num_threads = 0;
    emulate.emulate_fp8_activations = true;
    cpu_w8a8_ = std::make_unique<CpuBackend>(emulate);
  }

  // Runs an FP8 Linear on the GPU (kernel label from the op timing) and on the CPU, W8A16 and
  // emulated W8A8; checks the GPU against the reference of the arithmetic its kernel does.
  void CheckLinear(const std::string& what, int64_t m, int64_t n, int64_t k, StorageFormat format,
                   ActivationQuant input_quant, bool with_bias, CudaBackend& gpu, float x_amp = 2.0f) {
    const std::vector<float> w = RandomVec(rng_, n * k, -0.5f, 0.5f);
    const Fp8Weight q = Quantize(w, n, k, format);
    std::vector<float> x = Rand(m * k, -x_amp, x_amp);
    const std::vector<float> bias = with_bias ? Rand(n) : std::vector<float>{};
    const float input_scale = 2.5f / 448.0f;  // |x| < 2 fits
    DeviceLinear g = Place(gpu, dtype_, q, n, k, bias, input_quant, input_scale);
    DeviceLinear h = Place(cpu_, DType::kF32, q, n, k, bias, input_quant, input_scale);
    OwnedTensor gx = Upload(gpu, dtype_, {m, k}, x), hx = Upload(cpu_, DType::kF32, {m, k}, x);
    OwnedTensor gout = MakeTensor(gpu, dtype_, {m, n});
    Poison(gpu, gout.t);
    OwnedTensor want16 = MakeTensor(cpu_, DType::kF32, {m, n}), want8 = MakeTensor(cpu_, DType::kF32, {m, n});
    ASSERT_TRUE(cpu_.Linear(hx.t, h.lw, want16.t).ok());
    ASSERT_TRUE(cpu_w8a8_->Linear(hx.t, h.lw, want8.t).ok());
    gpu.StartOpTiming();
    const absl::Status st = gpu.Linear(gx.t, g.lw, gout.t);
    ASSERT_TRUE(st.ok()) << st << " " << what;
    auto ops = gpu.CollectOpTimings();
    ASSERT_TRUE(ops.ok() && !ops->empty());
    const std::string kernel = ops->back().op;
    ASSERT_NE(kernel.find("fp8"), std::string::npos) << kernel;
    const bool w8a8 = kernel.find("cublasLt") != std::string::npos ||
                      kernel.find("wgmma") != std::string::npos || kernel.find("w8a8") != std::string::npos;
    const std::vector<float> got = Download(gpu, gout.t);
    const std::vector<float> want = Download(cpu_, (w8a8 ? want8 : want16).t);
    const double err = RelErr(got, want);
    EXPECT_LE(err, Tolerance(dtype_)) << what << " via " << kernel;
    // The two references differ by the activation rounding (a few percent): the GPU must be on
    // the side of its own arithmetic, not merely near both.
    // (Only where they are farther apart than the GPU is from its own: with a few columns of tiny
    // inputs both round to the same outputs, up to the output's rounding.)
    const std::vector<float> other_want = Download(cpu_, (w8a8 ? want16 : want8).t);
    const double other = RelErr(got, other_want);
    if (input_quant != ActivationQuant::kNone && RelErr(other_want, want) > err) {
      EXPECT_GT(other, err) << what << " via " << kernel;
    }
    ++kernels_seen_[kernel.substr(kernel.find(' ', kernel.find(' ') + 1) + 1)];
  }

  // The GPU's W8A8 Linear of x [m, k] by `g` through `kernel` (the warpgroup GEMM, the W8A8 GEMV
  // or cuBLASLt: checked by its op label), with or without cuBLASLt's fast accumulation: its
  // relative error against `reference`. Leaves the options changed (the caller resets them).
  enum class W8A8Kernel { kCublasLt, kWgmma, kGemv };
  double W8A8Error(Tensor x, const DeviceLinear& g, int64_t m, int64_t n, W8A8Kernel kernel,
                   bool fast_accumulation, const std::vector<float>& reference) {
    CudaBackendOptions& o = gpu_->mutable_options();
    o.gemv_max_rows = 0;
    o.gemm_few_rows_max_rows = 0;
    o.gemm_fp8_wgmma_max_rows = kernel == W8A8Kernel::kWgmma ? 64 : 0;
    o.fp8_w8a8_gemv_min_rows = 1;
    o.fp8_w8a8_gemv_max_rows = kernel == W8A8Kernel::kGemv ? 16 : 0;
    o.fp8_fast_accumulation = fast_accumulation;
    OwnedTensor out = MakeTensor(*gpu_, dtype_, {m, n});
    gpu_->StartOpTiming();
    EXPECT_TRUE(gpu_->Linear(x, g.lw, out.t).ok());
    auto ops = gpu_->CollectOpTimings();
    EXPECT_TRUE(ops.ok() && !ops->empty());
    const char* label = kernel == W8A8Kernel::kWgmma  ? "wgmma"
                        : kernel == W8A8Kernel::kGemv ? "w8a8 gemv"
                                                      : "cublasLt";
    if (ops.ok() && !ops->empty()) {
      EXPECT_NE(ops->back().op.find(label), std::string::npos) << ops->back().op;
    }
    return RelErr(Download(*gpu_, out.t), reference);
  }

  // At each shape [m, n, k] (per-channel weights, per-token inputs), `kernel`'s error against the
  // CPU's W8A8 emulation is at most 1.25x cuBLASLt's with promoted sums (plus 1e-5). Resets the
  // options.
  struct Shape3 {
    int64_t m, n, k;
  };
  void ExpectAsAccurateAsCublas(W8A8Kernel kernel, const char* label, std::initializer_list<Shape3> shapes);

  // A random per-channel FP8 weight [n, k] with dynamic per-token inputs, and a random input [m, k],
  // on both backends.
  struct PerChannelCase {
    DeviceLinear g, h;
    OwnedTensor gx, hx;
  };
  PerChannelCase MakePerChannelCase(int64_t m, int64_t n, int64_t k) {
    const Fp8Weight q = Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, StorageFormat::Fp8(ScaleGranularity::kChannel));
    const std::vector<float> x = Rand(m * k, -2.0f, 2.0f);
    return {Place(*gpu_, dtype_, q, n, k, {}, ActivationQuant::kDynamicPerToken, 0),
            Place(cpu_, DType::kF32, q, n, k, {}, ActivationQuant::kDynamicPerToken, 0),
            Upload(*gpu_, dtype_, {m, k}, x), Upload(cpu_, DType::kF32, {m, k}, x)};
  }

  std::unique_ptr<CpuBackend> cpu_w8a8_;
  std::map<std::string, int> kernels_seen_;
};

void CudaFp8Test::ExpectAsAccurateAsCublas(W8A8Kernel kernel, const char* label,
                                           std::initializer_list<Shape3> shapes) {
  for (const Shape3& s : shapes) {
    PerChannelCase c = MakePerChannelCase(s.m, s.n, s.k);
    OwnedTensor want = MakeTensor(cpu_, DType::kF32, {s.m, s.n});
    ASSERT_TRUE(cpu_w8a8_->Linear(c.hx.t, c.h.lw, want.t).ok());
    const std::vector<float> reference = Download(cpu_, want.t);
    const double cublas = W8A8Error(c.gx.t, c.g, s.m, s.n, W8A8Kernel::kCublasLt, false, reference);
    const double err = W8A8Error(c.gx.t, c.g, s.m, s.n, kernel, false, reference);
    std::printf("[%s vs cublasLt] %lldx%lldx%lld: relative error %.3g against %.3g\n", label,
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), err,
                cublas);
    EXPECT_LE(err, 1.25 * cublas + 1e-5) << label << " " << s.m << "x" << s.n << "x" << s.k;
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

std::vector<StorageFormat> Formats() {
  return {StorageFormat::Fp8(ScaleGranularity::kTensor), StorageFormat::Fp8(ScaleGranularity::kChannel),
          StorageFormat::Fp8(ScaleGranularity::kBlock, 128, 128), StorageFormat::Fp8(ScaleGranularity::kGroup, 0, 128)};
}

TEST_P(CudaFp8Test, LinearEveryFormatShapeAndKernel) {
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{1, 256, 256},   {2, 384, 512},   {3, 200, 384},  {4, 1024, 4096}, {5, 130, 256},
                           {8, 512, 1024},  {16, 320, 128},  {64, 192, 448}, {300, 448, 192}, {1, 6144, 4096},
                           {2, 4096, 14336}, {128, 1024, 4096}};
  const ActivationQuant quants[] = {ActivationQuant::kNone, ActivationQuant::kDynamicPerToken,
                                    ActivationQuant::kStaticPerTensor, ActivationQuant::kDynamicPerGroup};
  for (const Shape3& s : shapes) {
    for (const StorageFormat& f : Formats()) {
      for (ActivationQuant a : quants) {
        if (a == ActivationQuant::kDynamicPerGroup && s.k % 128 != 0) continue;
        for (int variant = 0; variant < 4; ++variant) {
          // 0: defaults; 1: no GEMV (the GEMM paths at every row count); 2: the register GEMV,
          // 2 warps a row; 3: the ring GEMV forced.
          CudaBackendOptions& o = gpu_->mutable_options();
          o.gemv_max_rows = variant == 1 ? 0 : 4;
          // (The few-rows GEMM forced to 8 rows there, and the GEMV forms to 4 in variants 2-3: by
          // default they take those rows only on some GPUs.)
          o.gemm_few_rows_max_rows = variant == 1 ? 8 : CudaBackendOptions::kByDevice;
          o.fp8_gemv_max_rows = variant >= 2 ? 4 : CudaBackendOptions::kByDevice;
          o.fp8_w8a8_gemv_max_rows = variant >= 1 ? 0 : CudaBackendOptions::kByDevice;
          o.autotune_linear = variant < 2;
          o.gemv_warps_per_row = variant == 2 ? 2 : variant == 3 ? CudaBackendOptions::kGemvRingForm : 0;
          const std::string what = absl::StrCat(s.m, "x", s.n, "x", s.k, " ", f.ToString(), " inputs ",
                                                std::string(ActivationQuantName(a)), " variant ", variant);
          CheckLinear(what, s.m, s.n, s.k, f, a, (s.n + variant) % 3 == 0, *gpu_);
        }
      }
    }
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
  for (const auto& [kernel, count] : kernels_seen_) std::printf("[fp8 linear] %-24s %d calls\n", kernel.c_str(), count);
  for (const char* k : {"fp8 gemv", "fp8 gemv ring", "fp8 gemv mma", "fp8 few-rows gemm", "fp8 cublasLt",
                        "fp8 wgmma gemm", "fp8 dequant gemm"})
    EXPECT_GT(kernels_seen_[k], 0) << k << " never ran";
}

// The tensor-core ring (gemv_fp8_mma.cuh) at 1-8 rows: partial groups of 8 rows and partial
// blocks (N not a multiple of 8 or of the SM count), units of many widths (K from 64 to 14336),
// one or several groups a warp, bias or none; x far beyond f16's range and x of tiny values (the
// per-token power-of-two scaling).
TEST_P(CudaFp8Test, GemvMmaEveryRowCountAndShape) {
  struct Shape2 {
    int64_t n, k;
  };
  const Shape2 shapes[] = {{8, 64},     {13, 192},    {130, 256},  {1000, 448},  {264, 1024},
                           {4100, 512}, {2048, 4096}, {1040, 14336}, {6144, 4096}, {129, 3584}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemv_max_rows = 8;
  o.fp8_gemv_max_rows = 8;
  o.fp8_w8a8_gemv_max_rows = 0;
  o.autotune_linear = false;
  o.gemv_warps_per_row = CudaBackendOptions::kGemvRingForm;
  int calls = 0;
  for (const Shape2& s : shapes) {
    for (int64_t m = 1; m <= 8; ++m) {
      const StorageFormat f = StorageFormat::Fp8((s.n + m) % 2 ? ScaleGranularity::kTensor : ScaleGranularity::kChannel);
      // Beyond f16's range only where x is bf16 (f16 outputs would overflow).
      const float amp = m == 3 && dtype_ == DType::kBF16 ? 3.0e5f : m == 6 ? 1.0e-3f : 2.0f;
      const std::string what = absl::StrCat(m, "x", s.n, "x", s.k, " ", f.ToString(), " |x| < ", amp);
      CheckLinear(what, m, s.n, s.k, f, ActivationQuant::kDynamicPerToken, (s.n + m) % 3 == 0, *gpu_, amp);
      // 5-8 rows of 14336 columns (x as f16, 8 rows) leave no room for the ring: another form.
      if (m <= 4 || s.k < 14336) ++calls;
    }
  }
  EXPECT_EQ(kernels_seen_["fp8 gemv mma"], calls);
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The few-rows GEMM (gemm_few_rows.h) on E4M3 weights, 5 to 64 rows: per-tensor and per-channel
// scales, every token-tile count, both tile heights, shapes whose tiles straddle blocks (N = 300
// and K = 14336) or end in a partial tile, x far beyond f16's range (bf16) and of tiny values.
// W8A16 whatever the weight declares for its inputs (none, per token, static): CheckLinear holds
// it to the W8A16 reference, and nearer it than to the W8A8 one where x would be quantized.
TEST_P(CudaFp8Test, FewRowsGemmEveryRowCountAndShape) {
  struct Shape2 {
    int64_t n, k;
  };
  const Shape2 shapes[] = {{130, 256}, {1000, 4096}, {300, 14336}, {4096, 1024}, {264, 384}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemm_few_rows_max_rows = 64;
  o.fp8_w8a8_gemv_max_rows = 0;
  int calls = 0;
  for (const Shape2& s : shapes) {
    for (int64_t m : {5, 8, 9, 17, 32, 33, 64}) {
      const StorageFormat f = StorageFormat::Fp8((s.n + m) % 2 ? ScaleGranularity::kTensor : ScaleGranularity::kChannel);
      const float amp = m == 9 && dtype_ == DType::kBF16 ? 3.0e5f : m == 17 ? 1.0e-3f : 2.0f;
      const ActivationQuant quant = m == 8 || m == 33 ? ActivationQuant::kNone
                                    : m == 32 && amp == 2.0f ? ActivationQuant::kStaticPerTensor
                                                             : ActivationQuant::kDynamicPerToken;
      o.gemm_few_rows_tile_rows = m % 2 ? 128 : 256;
      const std::string what = absl::StrCat(m, "x", s.n, "x", s.k, " ", f.ToString(), " |x| < ", amp, " tile ",
                                            o.gemm_few_rows_tile_rows, " inputs ", std::string(ActivationQuantName(quant)));
      CheckLinear(what, m, s.n, s.k, f, quant, (s.n + m) % 3 == 0, *gpu_, amp);
      ++calls;
    }
  }
  EXPECT_EQ(kernels_seen_["fp8 few-rows gemm"], calls);
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The warpgroup GEMM (gemm_fp8_wgmma.h, W8A8) at 1 to 64 rows (every token-tile width, partial
// ones): per-tensor and per-channel weight scales, x quantized per token or by a static scale,
// shapes whose 128-row tiles end past N (130, 300) and whose 128-column steps end past K (208,
// 448: the TMA boxes' zero fill), tiles that straddle blocks (K = 14336 over few tiles; N = 4096),
// x far beyond f16's range (bf16) and of tiny values, bias or none. Held to the CPU's W8A8
// emulation, and nearer it than to W8A16.
TEST_P(CudaFp8Test, WgmmaGemmEveryRowCountAndShape) {
  struct Shape2 {
    int64_t n, k;
  };
  const Shape2 shapes[] = {{130, 256}, {1000, 4096}, {300, 14336}, {4096, 1024}, {264, 448}, {512, 208}, {64, 16}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemv_max_rows = 0;
  o.gemm_few_rows_max_rows = 0;
  o.gemm_fp8_wgmma_max_rows = 64;
  o.fp8_w8a8_gemv_max_rows = 0;
  int calls = 0;
  for (const Shape2& s : shapes) {
    for (int64_t m : {1, 5, 16, 17, 31, 32, 33, 50, 64}) {
      const StorageFormat f = StorageFormat::Fp8((s.n + m) % 2 ? ScaleGranularity::kTensor : ScaleGranularity::kChannel);
      const float amp = m == 33 && dtype_ == DType::kBF16 ? 3.0e5f : m == 17 ? 1.0e-3f : 2.0f;
      const ActivationQuant quant = m == 64 || m == 5 ? ActivationQuant::kStaticPerTensor : ActivationQuant::kDynamicPerToken;
      const std::string what = absl::StrCat(m, "x", s.n, "x", s.k, " ", f.ToString(), " |x| < ", amp, " inputs ",
                                            std::string(ActivationQuantName(quant)));
      CheckLinear(what, m, s.n, s.k, f, quant, (s.n + m) % 3 == 0, *gpu_, amp);
      ++calls;
    }
  }
  EXPECT_EQ(kernels_seen_["fp8 wgmma gemm"], calls);
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The warpgroup GEMM is as accurate as cuBLASLt's FP8 GEMM with promoted sums: both against the
// CPU's W8A8 emulation (float32 sums of the same quantized operands) on the same inputs, K from
// one stage to many (the tensor cores keep fewer bits than float32 while they sum E4M3 products;
// both kernels add their MMAs' sums into float32 totals every few MMAs).
TEST_P(CudaFp8Test, WgmmaAsAccurateAsCublas) {
  ExpectAsAccurateAsCublas(
      W8A8Kernel::kWgmma, "wgmma",
      {{12, 256, 128}, {24, 1000, 320}, {32, 4096, 4096}, {17, 512, 14336}, {32, 640, 2048}});
}

// The W8A8 GEMV (1-16 rows) against the CPU's W8A8 emulation: weight rows in partial groups of 8
// (n = 7, 9, 130, 300), K from one 64-column chunk to 14336 (every split of K it picks), per-tensor
// and per-channel weights, static and per-token inputs, bias or none, tiny and large inputs; and
// K not a multiple of 64 goes to another kernel.
TEST_P(CudaFp8Test, W8A8GemvEveryRowCountAndShape) {
  struct Shape2 {
    int64_t n, k;
  };
  const Shape2 shapes[] = {{130, 256}, {1000, 4096}, {300, 14336}, {4096, 1024}, {264, 448},
                           {512, 192}, {64, 64},     {7, 128},     {9, 320},     {6144, 4096}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.fp8_w8a8_gemv_min_rows = 1;
  o.fp8_w8a8_gemv_max_rows = 16;
  int calls = 0;
  for (const Shape2& s : shapes) {
    for (int64_t m : {1, 2, 3, 5, 8, 9, 12, 16}) {
      const StorageFormat f =
          StorageFormat::Fp8((s.n + m) % 2 ? ScaleGranularity::kTensor : ScaleGranularity::kChannel);
      const float amp = m == 9 && dtype_ == DType::kBF16 ? 3.0e5f : m == 3 ? 1.0e-3f : 2.0f;
      const ActivationQuant quant =
          m == 16 || m == 5 ? ActivationQuant::kStaticPerTensor : ActivationQuant::kDynamicPerToken;
      const std::string what = absl::StrCat(m, "x", s.n, "x", s.k, " ", f.ToString(), " |x| < ", amp,
                                            " inputs ", std::string(ActivationQuantName(quant)));
      CheckLinear(what, m, s.n, s.k, f, quant, (s.n + m) % 3 == 0, *gpu_, amp);
      ++calls;
    }
  }
  EXPECT_EQ(kernels_seen_["fp8 w8a8 gemv"], calls);
  kernels_seen_.clear();
  CheckLinear("4x256x208", 4, 256, 208, StorageFormat::Fp8(ScaleGranularity::kChannel),
              ActivationQuant::kDynamicPerToken, false, *gpu_);
  EXPECT_EQ(kernels_seen_["fp8 w8a8 gemv"], 0);
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The W8A8 GEMV is as accurate as cuBLASLt's FP8 GEMM with promoted sums (as the warpgroup GEMM
// above): it adds its MMAs' sums into float32 totals every 128 columns.
TEST_P(CudaFp8Test, W8A8GemvAsAccurateAsCublas) {
  ExpectAsAccurateAsCublas(
      W8A8Kernel::kGemv, "w8a8 gemv",
      {{1, 4096, 4096}, {8, 1000, 320}, {16, 512, 14336}, {3, 640, 2048}, {12, 256, 128}});
}

// cuBLASLt's fast accumulation (the default for per-channel x per-token scales: the E4M3 products
// summed in the tensor cores over the whole K) costs a small part of what the recipe's own
// activation rounding costs: against the CPU's float32 sums of the same quantized operands, its
// error stays under a quarter of the distance between those sums and the float32 sums of the
// unrounded activations, at the 8B shapes' K (4096, 14336) and row counts of prefill and large
// decode batches.
TEST_P(CudaFp8Test, CublasFastAccumulationCostsLittleAgainstTheActivationRounding) {
  struct Shape3 {
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{96, 1024, 4096}, {256, 512, 14336}, {600, 384, 4096}, {65, 256, 2048}};
  for (const Shape3& s : shapes) {
    PerChannelCase c = MakePerChannelCase(s.m, s.n, s.k);
    DeviceLinear &g = c.g, &h = c.h;
    OwnedTensor &gx = c.gx, &hx = c.hx;
    OwnedTensor w8a8 = MakeTensor(cpu_, DType::kF32, {s.m, s.n}), w8a16 = MakeTensor(cpu_, DType::kF32, {s.m, s.n});
    ASSERT_TRUE(cpu_w8a8_->Linear(hx.t, h.lw, w8a8.t).ok());
    ASSERT_TRUE(cpu_.Linear(hx.t, h.lw, w8a16.t).ok());
    const std::vector<float> reference = Download(cpu_, w8a8.t);
    const double activation_rounding = RelErr(Download(cpu_, w8a16.t), reference);
    double err[2];
    for (int fast = 0; fast < 2; ++fast)
      err[fast] =
          W8A8Error(gx.t, g, s.m, s.n, W8A8Kernel::kCublasLt, /*fast_accumulation=*/fast != 0, reference);
    std::printf("[fast accumulation] %lldx%lldx%lld: relative error %.3g (promoted %.3g); activation rounding %.3g\n",
                static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), err[1], err[0],
                activation_rounding);
    EXPECT_LE(err[1], 0.25 * activation_rounding) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_LE(err[0], 1.05 * err[1] + 1e-6) << "promoted sums should not be the less accurate";
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// At 65-256 rows and narrow weights cuBLASLt's raw sums (per-tensor scale form, float32) and a
// kernel applying the scales take the place of its per-token x per-channel form
// (CudaBackendOptions::fp8_split_scales): every weight and activation scale it takes (per tensor,
// per channel; dynamic per token, static), with and without bias, odd and even row counts, held to
// the CPU's W8A8 float32 (CheckLinear) and near the other form's outputs (the same E4M3 operands:
// only the order of the float32 products and of the scales' multiplications differ).
TEST_P(CudaFp8Test, LinearWithScalesAppliedAfterRawSums) {
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3& s :
       {Shape3{65, 512, 1024}, Shape3{128, 4096, 1024}, Shape3{203, 1028, 2048}, Shape3{256, 640, 4096}})
    for (const StorageFormat& f :
         {StorageFormat::Fp8(ScaleGranularity::kTensor), StorageFormat::Fp8(ScaleGranularity::kChannel)})
      for (ActivationQuant a : {ActivationQuant::kDynamicPerToken, ActivationQuant::kStaticPerTensor})
        for (bool bias : {false, true}) {
          const std::string what =
              absl::StrCat(s.m, "x", s.n, "x", s.k, " ", f.ToString(), bias ? " bias" : "");
          CheckLinear("split scales " + what, s.m, s.n, s.k, f, a, bias, *gpu_);
          // The same operands through both forms.
          const Fp8Weight q = Quantize(RandomVec(rng_, s.n * s.k, -0.5f, 0.5f), s.n, s.k, f);
          DeviceLinear g =
              Place(*gpu_, dtype_, q, s.n, s.k, bias ? Rand(s.n) : std::vector<float>{}, a, 2.5f / 448.0f);
          OwnedTensor gx = Upload(*gpu_, dtype_, {s.m, s.k}, Rand(s.m * s.k, -2.0f, 2.0f));
          OwnedTensor split = MakeTensor(*gpu_, dtype_, {s.m, s.n}),
                      outer = MakeTensor(*gpu_, dtype_, {s.m, s.n});
          gpu_->mutable_options().fp8_split_scales = true;
          ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, split.t).ok()) << what;
          gpu_->mutable_options().fp8_split_scales = false;
          ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, outer.t).ok()) << what;
          gpu_->mutable_options().fp8_split_scales = true;
          EXPECT_LE(RelErr(Download(*gpu_, split.t), Download(*gpu_, outer.t)), Tolerance(dtype_)) << what;
        }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The cuBLASLt path quantizes x in chunks of rows when the FP8 workspace holds fewer than M, rows of
// up to 16384 columns and longer.
// The gate/up projection and SiLU-and-mul in one kernel (Backend::LinearSiluMul): at one row
// the register FP8 GEMV's gate/up form, every scale granularity, bit for bit what Linear then
// SiluMul give and near the CPU's float32 on the dequantized weights; the other row counts (the
// tensor-core ring, the few-rows GEMM) and F not a multiple of 4 run unfused.
TEST_P(CudaFp8Test, LinearSiluMulFusedInTheGemv) {
  struct Case {
    int64_t f, k;
  };
  for (const Case& c : {Case{64, 256}, Case{192, 384}, Case{1792, 4096}, Case{66, 128}})
    for (const StorageFormat& format : Formats())
      for (int64_t m : {1, 2, 5}) {
        const int64_t n = 2 * c.f;
        const std::vector<float> w = RandomVec(rng_, n * c.k, -0.5f, 0.5f);
        const Fp8Weight q = Quantize(w, n, c.k, format);
        const std::vector<float> x = Rand(m * c.k, -2.0f, 2.0f), bias = Rand(n);
        DeviceLinear g = Place(*gpu_, dtype_, q, n, c.k, bias, ActivationQuant::kNone, 1.0f);
        DeviceLinear h = Place(cpu_, DType::kF32, q, n, c.k, bias, ActivationQuant::kNone, 1.0f);
        OwnedTensor gx = Upload(*gpu_, dtype_, {m, c.k}, x), hx = Upload(cpu_, DType::kF32, {m, c.k}, x);
        const std::string what = "m " + std::to_string(m) + " F " + std::to_string(c.f) + " K " +
                                 std::to_string(c.k) + " " + format.ToString();
        const std::vector<float> got =
            testing::CheckLinearSiluMul(*gpu_, gx.t, g.lw, m, m == 1 && c.f % 4 == 0, what);
        OwnedTensor hscratch = MakeTensor(cpu_, DType::kF32, {m, n}), hout = MakeTensor(cpu_, DType::kF32, {m, c.f});
        ASSERT_TRUE(cpu_.LinearSiluMul(hx.t, h.lw, hscratch.t, hout.t).ok());
        EXPECT_LE(RelErr(got, Download(cpu_, hout.t)), 2 * Tolerance(dtype_)) << what;
      }
}

// The decode GEMV forms its input's RMSNorm itself and adds its output into the residual
// (Backend::RmsNormLinear, LinearAddInto): the register FP8 GEMV (the rule's pick at one row; at 2
// and 4 rows forced, one and two warps a row), every scale granularity, K from 512 (fewer norm
// threads than the block's) to 8192 (two chunks a norm thread), with and without the gate/up
// form: bit for bit what the norm kernel then Linear (Linear then Add) give, and near the CPU's
// float32. Rows whose kernel is another (the tensor-core ring at 2 rows by the rule, 9 rows) and
// inputs too large to stage (4 rows of 8192) run the ops apart.
TEST_P(CudaFp8Test, NormAndResidualFusedInTheGemv) {
  struct Case {
    int64_t n, k, m;
    int wpr;  // > 0: the register GEMV forced with wpr warps a row; 0: the rules
    bool glu, norm_fused, add_fused;
  };
  const Case cases[] = {{768, 1024, 1, 0, false, true, true},    {256, 512, 1, 0, false, true, true},
                        {512, 8192, 1, 0, false, true, true},    {3584, 4096, 1, 0, true, true, true},
                        {512, 4096, 2, 1, false, true, true},    {512, 4096, 4, 2, false, true, true},
                        {1024, 2048, 4, 1, true, true, true},    {512, 8192, 4, 1, false, false, true},
                        {768, 1024, 2, 0, false, false, false},  {768, 1024, 9, 0, false, false, false}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.fp8_gemv_max_rows = 4;  // the H100's cut-overs, whatever runs the test
  o.gemm_few_rows_max_rows = 8;
  o.gemm_fp8_wgmma_max_rows = 32;
  o.fp8_w8a8_gemv_max_rows = 0;
  const float eps = 1e-5f;
  for (const Case& c : cases)
    for (const StorageFormat& format : Formats()) {
      o.autotune_linear = c.wpr == 0;
      o.gemv_warps_per_row = c.wpr;
      const Fp8Weight q = Quantize(RandomVec(rng_, c.n * c.k, -0.5f, 0.5f), c.n, c.k, format);
      const std::vector<float> x = Rand(c.m * c.k, -3.0f, 3.0f), bias = Rand(c.n), nw = Rand(c.k, 0.5f, 1.5f);
      DeviceLinear g = Place(*gpu_, dtype_, q, c.n, c.k, bias, ActivationQuant::kNone, 1.0f);
      DeviceLinear h = Place(cpu_, DType::kF32, q, c.n, c.k, bias, ActivationQuant::kNone, 1.0f);
      OwnedTensor gx = Upload(*gpu_, dtype_, {c.m, c.k}, x), hx = Upload(cpu_, DType::kF32, {c.m, c.k}, x);
      OwnedTensor gn = Upload(*gpu_, dtype_, {c.k}, nw), hn = Upload(cpu_, DType::kF32, {c.k}, nw);
      const std::string what = absl::StrCat("m ", c.m, " N ", c.n, " K ", c.k, " wpr ", c.wpr, c.glu ? " gate/up " : " ",
                                            format.ToString());
      const std::vector<float> got =
          testing::CheckFusedNormAndResidual(*gpu_, gx.t, gn.t, eps, g.lw, c.m, c.glu, c.norm_fused,
                                             c.add_fused, what);
      const int64_t out_cols = c.glu ? c.n / 2 : c.n;
      OwnedTensor hnormed = MakeTensor(cpu_, DType::kF32, {c.m, c.k}), hout = MakeTensor(cpu_, DType::kF32, {c.m, c.n});
      OwnedTensor hact = MakeTensor(cpu_, DType::kF32, {c.m, out_cols});
      ASSERT_TRUE(cpu_.RmsNormLinear(hx.t, hn.t, eps, hnormed.t, h.lw, hout.t, c.glu ? hact.t : Tensor()).ok());
      EXPECT_LE(RelErr(got, Download(cpu_, (c.glu ? hact : hout).t)), 2 * Tolerance(dtype_)) << what;
    }
}

TEST_P(CudaFp8Test, LinearInRowChunks) {
  CudaBackendOptions o;
  o.fp8_workspace_bytes = 64 << 10;  // 40 rows of 1536 columns a chunk
  auto small = testing::MakeCuda(dtype_, o);
  ASSERT_NE(small, nullptr);
  small->mutable_options().gemv_max_rows = 0;
  for (const StorageFormat& f : Formats())
    for (ActivationQuant a : {ActivationQuant::kDynamicPerToken, ActivationQuant::kDynamicPerGroup,
                              ActivationQuant::kStaticPerTensor})
    {
      CheckLinear("chunked " + f.ToString(), 333, 256, 1536, f, a, true, *small);
      // Rows longer than the quantizing kernel keeps in registers (16384 columns: read twice), in
      // the default workspace (64 KB holds no such row).
      CheckLinear("long rows " + f.ToString(), 40, 128, 16512, f, a, false, *gpu_);
    }
}

// Captured in a graph and replayed after new inputs are written: the same outputs as eager runs,
// bit for bit, for every FP8 linear form: the GEMVs (1-4 rows), the few-rows GEMM (8, 16 rows;
// straddling tiles summed in a fixed order), the warpgroup GEMM (16-64 rows, taken up to 64 here;
// at 64 rows every tile straddles blocks) and cuBLASLt (128 rows, and the block-scaled weights).
TEST_P(CudaFp8Test, LinearReplayedFromAGraph) {
  gpu_->mutable_options().gemm_fp8_wgmma_max_rows = 64;
  gpu_->mutable_options().fp8_w8a8_gemv_min_rows = 1;
  struct Rows {
    int64_t m;
    int w8a8_gemv_rows;
  };
  for (const Rows r : {Rows{1, 0}, Rows{2, 0}, Rows{3, 0}, Rows{4, 0}, Rows{8, 0}, Rows{16, 0}, Rows{32, 0},
                       Rows{64, 0}, Rows{128, 0}, Rows{1, 16}, Rows{8, 16}, Rows{16, 16}}) {
    const int64_t m = r.m;
    gpu_->mutable_options().fp8_w8a8_gemv_max_rows = r.w8a8_gemv_rows;
    for (const StorageFormat& f : Formats()) {
      const int64_t n = 512, k = 1024;
      const Fp8Weight q = Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, f);
      DeviceLinear g = Place(*gpu_, dtype_, q, n, k, Rand(n), ActivationQuant::kDynamicPerToken, 0);
      OwnedTensor gx = Upload(*gpu_, dtype_, {m, k}, Rand(m * k)), out = MakeTensor(*gpu_, dtype_, {m, n}),
                  eager = MakeTensor(*gpu_, dtype_, {m, n});
      ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, out.t).ok());  // first call: plans, heuristics
      ASSERT_TRUE(gpu_->BeginCapture().ok());
      ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, out.t).ok());
      auto graph = gpu_->EndCapture();
      ASSERT_TRUE(graph.ok()) << graph.status();
      for (int round = 0; round < 3; ++round) {
        const std::vector<float> x = Rand(m * k);
        ASSERT_TRUE(gpu_->UploadConverted(x.data(), DType::kF32, gx.t).ok());
        Poison(*gpu_, out.t);
        ASSERT_TRUE((*graph)->Replay().ok());
        ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, eager.t).ok());
        EXPECT_EQ(Download(*gpu_, out.t), Download(*gpu_, eager.t))
            << m << " rows, " << f.ToString() << ", W8A8 GEMV up to " << r.w8a8_gemv_rows;
      }
    }
  }
  gpu_->mutable_options().gemm_fp8_wgmma_max_rows = CudaBackendOptions{}.gemm_fp8_wgmma_max_rows;
  gpu_->mutable_options().fp8_w8a8_gemv_max_rows = CudaBackendOptions{}.fp8_w8a8_gemv_max_rows;
  gpu_->mutable_options().fp8_w8a8_gemv_min_rows = CudaBackendOptions{}.fp8_w8a8_gemv_min_rows;
}

// --- FP8 inputs quantized by the op that writes them (Backend::Fp8Input) ---

std::vector<uint8_t> Bytes(Backend& b, Tensor t) {
  std::vector<uint8_t> v(t.bytes());
  EXPECT_TRUE(b.CopyToHost(v.data(), t).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  return v;
}

// The GPU's per-token quantizer gives the CPU's codes and scales bit for bit for every finite
// 16-bit input (all 65,536 patterns of the activation type, each row bounded by its own amax,
// which the quantizers' reciprocal-and-correction division relies on: fp8.cuh's
// Fp8ScaleDivisor), at amaxes from the minimum scale's floor to the type's largest values.
TEST_P(CudaFp8Test, QuantizerCodesEqualTheCpusForEvery16BitValue) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "16-bit activations only";
  std::vector<float> values;
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float v = dtype_ == DType::kBF16 ? Bf16ToFloat(static_cast<uint16_t>(bits)) : Fp16ToFloat(static_cast<uint16_t>(bits));
    if (std::isfinite(v)) values.push_back(v);
  }
  std::vector<float> amaxes = {kFp8MinScale * 448.0f * 0.5f, kFp8MinScale * 448.0f, kFp8MinScale * 448.0f * 2.0f,
                               1.0f, 448.0f, 65504.0f};
  if (dtype_ == DType::kBF16) amaxes.push_back(3.0e38f);
  std::uniform_real_distribution<float> log_amax(-20.0f, 15.0f);
  while (amaxes.size() < 40) amaxes.push_back(std::exp2(log_amax(rng_)));
  for (float& a : amaxes) a = dtype_ == DType::kBF16 ? Bf16ToFloat(FloatToBf16(a)) : Fp16ToFloat(FloatToFp16(a));
  const int64_t rows = static_cast<int64_t>(amaxes.size()), cols = (static_cast<int64_t>(values.size()) + 1 + 15) / 16 * 16;
  std::vector<float> x(rows * cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    int64_t c = 0;
    row[c++] = amaxes[r];
    for (float v : values)
      if (std::fabs(v) <= amaxes[r]) row[c++] = v;
  }
  OwnedTensor gx = Upload(*gpu_, dtype_, {rows, cols}, x);
  OwnedTensor codes = MakeTensor(*gpu_, DType::kU8, {rows, cols}), scales = MakeTensor(*gpu_, DType::kF32, {rows});
  ASSERT_TRUE(cuda::LaunchQuantizeFp8(dtype_, gx.t.data(), codes.t.data(), scales.t.data_as<float>(), rows, cols,
                                      cuda::Fp8ActivationScaling::kPerToken, nullptr, gpu_->stream()).ok());
  ThreadPool pool(2);
  std::vector<uint8_t> want_codes(rows * cols);
  std::vector<float> want_scales(rows);
  cpu::QuantizeFp8Rows(pool, x.data(), want_codes.data(), want_scales.data(), rows, cols,
                       ActivationQuant::kDynamicPerToken, 0.0f);
  const std::vector<uint8_t> got_codes = Bytes(*gpu_, codes.t);
  const std::vector<float> got_scales = Download(*gpu_, scales.t);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(got_scales[r], want_scales[r]) << "amax " << amaxes[r];
    int64_t differ = 0, first = -1;
    for (int64_t c = 0; c < cols; ++c)
      if (got_codes[r * cols + c] != want_codes[r * cols + c] && differ++ == 0) first = c;
    EXPECT_EQ(differ, 0) << "amax " << amaxes[r] << ": first at x = " << (first >= 0 ? x[r * cols + first] : 0.0f)
                         << " GPU " << (first >= 0 ? int{got_codes[r * cols + first]} : 0) << " CPU "
                         << (first >= 0 ? int{want_codes[r * cols + first]} : 0);
  }
}

// The RMSNorm and SiLU-and-mul kernels' quantized outputs: exactly the codes and scales of the
// stand-alone quantizer run on their 16-bit outputs (which stay bit-identical to the plain
// kernels'), per token and static, for the hidden and MLP widths of small and 8B-class models.
TEST_P(CudaFp8Test, NormAndSiluMulQuantizeAsTheQuantizer) {
  const cuda::Stream stream = gpu_->stream();
  // 300 rows: more blocks than SMs; 66,000 columns: past what the norm holds in registers (8 chunks
  // of 512 threads), so its store-then-reread form runs.
  for (const int64_t rows : {1, 9, 33, 300}) {
    for (const int64_t dim : {384, 4096, 14336, 66000}) {
      for (const bool per_token : {true, false}) {
        SCOPED_TRACE(absl::StrCat(rows, " rows of ", dim, per_token ? ", per token" : ", static"));
        const auto scaling = per_token ? cuda::Fp8ActivationScaling::kPerToken : cuda::Fp8ActivationScaling::kStatic;
        OwnedTensor static_scale = Upload(*gpu_, DType::kF32, {1}, {3.0f / 448.0f});
        const std::vector<float> residual0 = Rand(rows * dim, -2, 2);
        OwnedTensor res_a = Upload(*gpu_, dtype_, {rows, dim}, residual0), res_d = Upload(*gpu_, dtype_, {rows, dim}, residual0),
                    res_b = MakeTensor(*gpu_, dtype_, {rows, dim}), delta = Upload(*gpu_, dtype_, {rows, dim}, Rand(rows * dim)),
                    weight = Upload(*gpu_, dtype_, {dim}, Rand(dim, 0.5f, 1.5f));
        ASSERT_TRUE(gpu_->CopyToDevice(res_b.t, Bytes(*gpu_, res_a.t).data()).ok());
        OwnedTensor out_a = MakeTensor(*gpu_, dtype_, {rows, dim}), out_b = MakeTensor(*gpu_, dtype_, {rows, dim});
        OwnedTensor codes_a = MakeTensor(*gpu_, DType::kU8, {rows, dim}), codes_b = MakeTensor(*gpu_, DType::kU8, {rows, dim});
        OwnedTensor scales_a = MakeTensor(*gpu_, DType::kF32, {rows}), scales_b = MakeTensor(*gpu_, DType::kF32, {rows});
        const float* fixed = per_token ? nullptr : static_scale.t.data_as<const float>();
        cuda::Fp8RowOutput q;
        q.codes = codes_a.t.data_as<uint8_t>();
        q.scales = per_token ? scales_a.t.data_as<float>() : nullptr;
        q.static_scale = fixed;
        // Fused, then plain + the quantizer.
        ASSERT_TRUE(cuda::LaunchRmsNorm(dtype_, nullptr, res_a.t.data(), delta.t.data(), weight.t.data(), out_a.t.data(),
                                        rows, dim, 1e-5f, stream, true, &q).ok());
        ASSERT_TRUE(cuda::LaunchRmsNorm(dtype_, nullptr, res_b.t.data(), delta.t.data(), weight.t.data(), out_b.t.data(),
                                        rows, dim, 1e-5f, stream, true).ok());
        ASSERT_TRUE(cuda::LaunchQuantizeFp8(dtype_, out_b.t.data(), codes_b.t.data(), scales_b.t.data_as<float>(), rows,
                                            dim, scaling, fixed, stream).ok());
        EXPECT_EQ(Bytes(*gpu_, out_a.t), Bytes(*gpu_, out_b.t)) << "RMSNorm output";
        EXPECT_EQ(Bytes(*gpu_, res_a.t), Bytes(*gpu_, res_b.t)) << "residual";
        EXPECT_EQ(Bytes(*gpu_, codes_a.t), Bytes(*gpu_, codes_b.t)) << "RMSNorm codes";
        if (per_token) {
          EXPECT_EQ(Download(*gpu_, scales_a.t), Download(*gpu_, scales_b.t)) << "RMSNorm scales";
        }
        // SiLU-and-mul of [rows, 2 * dim] into [rows, dim].
        OwnedTensor gate_up = Upload(*gpu_, dtype_, {rows, 2 * dim}, Rand(2 * rows * dim, -4, 4));
        Poison(*gpu_, codes_a.t);
        ASSERT_TRUE(cuda::LaunchSiluMulFp8(dtype_, gate_up.t.data(), out_a.t.data(), rows, dim, q, stream, true).ok());
        ASSERT_TRUE(cuda::LaunchSiluMul(dtype_, gate_up.t.data(), out_b.t.data(), rows, dim, stream, true).ok());
        ASSERT_TRUE(cuda::LaunchQuantizeFp8(dtype_, out_b.t.data(), codes_b.t.data(), scales_b.t.data_as<float>(), rows,
                                            dim, scaling, fixed, stream).ok());
        EXPECT_EQ(Bytes(*gpu_, out_a.t), Bytes(*gpu_, out_b.t)) << "SiLU-and-mul output";
        EXPECT_EQ(Bytes(*gpu_, codes_a.t), Bytes(*gpu_, codes_b.t)) << "SiLU-and-mul codes";
        if (per_token) {
          EXPECT_EQ(Download(*gpu_, scales_a.t), Download(*gpu_, scales_b.t)) << "SiLU-and-mul scales";
        }
        // With the 16-bit output unused: the same codes; the register-held forms (up to 8 chunks
        // of 1024 threads for SiLU-and-mul, of 512 for the norm) leave it unwritten.
        q.values_unused = true;
        const bool held = dim <= 8 * 512 * 8;
        Poison(*gpu_, codes_a.t);
        Poison(*gpu_, out_a.t);
        ASSERT_TRUE(cuda::LaunchSiluMulFp8(dtype_, gate_up.t.data(), out_a.t.data(), rows, dim, q, stream, true).ok());
        EXPECT_EQ(Bytes(*gpu_, codes_a.t), Bytes(*gpu_, codes_b.t)) << "SiLU-and-mul codes, output unused";
        const std::vector<uint8_t> silu_out = Bytes(*gpu_, out_a.t);
        if (held) {
          EXPECT_TRUE(std::all_of(silu_out.begin(), silu_out.end(), [](uint8_t b) { return b == 0xFF; }))
              << "SiLU-and-mul wrote the unused output";
        } else {
          EXPECT_EQ(silu_out, Bytes(*gpu_, out_b.t)) << "SiLU-and-mul output";
        }
        OwnedTensor res_c = Upload(*gpu_, dtype_, {rows, dim}, residual0);
        Poison(*gpu_, codes_a.t);
        Poison(*gpu_, out_a.t);
        ASSERT_TRUE(cuda::LaunchRmsNorm(dtype_, nullptr, res_c.t.data(), delta.t.data(), weight.t.data(), out_a.t.data(),
                                        rows, dim, 1e-5f, stream, true, &q).ok());
        ASSERT_TRUE(cuda::LaunchRmsNorm(dtype_, nullptr, res_d.t.data(), delta.t.data(), weight.t.data(), out_b.t.data(),
                                        rows, dim, 1e-5f, stream, true).ok());
        ASSERT_TRUE(cuda::LaunchQuantizeFp8(dtype_, out_b.t.data(), codes_b.t.data(), scales_b.t.data_as<float>(), rows,
                                            dim, scaling, fixed, stream).ok());
        EXPECT_EQ(Bytes(*gpu_, codes_a.t), Bytes(*gpu_, codes_b.t)) << "RMSNorm codes, output unused";
        EXPECT_EQ(Bytes(*gpu_, res_c.t), Bytes(*gpu_, res_d.t)) << "residual, output unused";
        const std::vector<uint8_t> norm_out = Bytes(*gpu_, out_a.t);
        if (held) {
          EXPECT_TRUE(std::all_of(norm_out.begin(), norm_out.end(), [](uint8_t b) { return b == 0xFF; }))
              << "RMSNorm wrote the unused output";
        }
      }
    }
  }
}

// Through the backend: an FP8 linear whose input the norm quantized (AddRmsNormFp8 +
// LinearFp8Input) gives the outputs of AddRmsNorm + Linear bit for bit, on the warpgroup GEMM and
// cuBLASLt, eagerly and replayed from a graph; the W8A16 row counts (GEMV, few-rows GEMM), per-group
// inputs and a backend with the fusion off do not take a quantized input.
TEST_P(CudaFp8Test, LinearTakesItsInputQuantizedByTheNorm) {
  const int64_t n = 768, k = 1024;
  // The row cut-overs pinned to one GPU's (the H100's; by default they follow the GPU), so that
  // the W8A16 rows are 1-8 whatever runs the test.
  CudaBackendOptions& o = gpu_->mutable_options();
  o.fp8_gemv_max_rows = 4;
  o.gemm_few_rows_max_rows = 8;
  o.gemm_fp8_wgmma_max_rows = 32;
  o.fp8_w8a8_gemv_min_rows = 1;
  for (const int w8a8_gemv_rows : {0, 16})  // and with the W8A8 GEMV taking 1-16 rows
    for (const StorageFormat& f : Formats()) {
      o.fp8_w8a8_gemv_max_rows = w8a8_gemv_rows;
      for (ActivationQuant a : {ActivationQuant::kDynamicPerToken, ActivationQuant::kStaticPerTensor,
                                ActivationQuant::kDynamicPerGroup}) {
        const Fp8Weight q = Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, f);
        DeviceLinear g = Place(*gpu_, dtype_, q, n, k, Rand(n), a, 3.0f / 448.0f);
        const bool per_group = a == ActivationQuant::kDynamicPerGroup;
        for (const int64_t m : {1, 8, 9, 32, 48, 200}) {
          SCOPED_TRACE(absl::StrCat(f.ToString(), " input ", static_cast<int>(a), ", ", m, " rows"));
          const bool takes = gpu_->TakesFp8Input(g.lw, m);
          const bool w8a16_rows = m <= 8 && m > w8a8_gemv_rows;
          const bool block_scaled =
              f.granularity == ScaleGranularity::kBlock || f.granularity == ScaleGranularity::kGroup;
          // Block/group weights with per-token or static inputs: cuBLASLt's rules decide (no claim).
          if (per_group || (w8a16_rows && !block_scaled)) {
            EXPECT_FALSE(takes);
          }
          if (!takes) continue;
          const std::vector<float> residual = Rand(m * k, -2, 2);
          OwnedTensor res_a = Upload(*gpu_, dtype_, {m, k}, residual),
                      res_b = Upload(*gpu_, dtype_, {m, k}, residual),
                      delta = Upload(*gpu_, dtype_, {m, k}, Rand(m * k)),
                      norm_w = Upload(*gpu_, dtype_, {k}, Rand(k, 0.5f, 1.5f));
          OwnedTensor normed_a = MakeTensor(*gpu_, dtype_, {m, k}),
                      normed_b = MakeTensor(*gpu_, dtype_, {m, k});
          OwnedTensor codes = MakeTensor(*gpu_, DType::kF8E4M3, {m, k}),
                      scales = MakeTensor(*gpu_, DType::kF32, {m});
          OwnedTensor out_a = MakeTensor(*gpu_, dtype_, {m, n}), out_b = MakeTensor(*gpu_, dtype_, {m, n});
          const Fp8Input input{codes.t, scales.t};
          Poison(*gpu_, normed_a.t);
          gpu_->StartOpTiming();
          ASSERT_TRUE(gpu_->AddRmsNormFp8(res_a.t, delta.t, norm_w.t, 1e-5f, normed_a.t, g.lw, input).ok());
          const std::vector<uint8_t> normed_after = Bytes(*gpu_, normed_a.t);
          ASSERT_TRUE(gpu_->LinearFp8Input(normed_a.t, input, g.lw, out_a.t).ok());
          auto ops = gpu_->CollectOpTimings();
          ASSERT_TRUE(ops.ok() && ops->size() == 2);
          const std::string kernel = ops->back().op;
          ASSERT_TRUE(gpu_->AddRmsNorm(res_b.t, delta.t, norm_w.t, 1e-5f, normed_b.t).ok());
          ASSERT_TRUE(gpu_->Linear(normed_b.t, g.lw, out_b.t).ok());
          EXPECT_EQ(Bytes(*gpu_, out_a.t), Bytes(*gpu_, out_b.t)) << kernel;
          // TakesFp8Input asked cuBLASLt first (it refuses e.g. per-tensor weights with a static
          // input scale at 48 rows on an H100; then the answer was no): a yes is a W8A8 GEMM that
          // reads only the codes, so the norm left its 16-bit output unwritten.
          EXPECT_TRUE(kernel.find("wgmma") != std::string::npos ||
                      kernel.find("cublasLt") != std::string::npos ||
                      kernel.find("w8a8") != std::string::npos)
              << kernel;
          EXPECT_TRUE(std::all_of(normed_after.begin(), normed_after.end(), [](uint8_t b) {
            return b == 0xFF;
          })) << "the 16-bit output was written";
          ASSERT_TRUE(gpu_->TakesFp8Input(g.lw, m));
          // Replayed from a graph after new inputs: still the plain path's outputs.
          ASSERT_TRUE(gpu_->BeginCapture().ok());
          ASSERT_TRUE(gpu_->AddRmsNormFp8(res_a.t, delta.t, norm_w.t, 1e-5f, normed_a.t, g.lw, input).ok());
          ASSERT_TRUE(gpu_->LinearFp8Input(normed_a.t, input, g.lw, out_a.t).ok());
          auto graph = gpu_->EndCapture();
          ASSERT_TRUE(graph.ok()) << graph.status();
          const std::vector<float> next = Rand(m * k, -3, 3);
          ASSERT_TRUE(gpu_->UploadConverted(next.data(), DType::kF32, res_a.t).ok());
          ASSERT_TRUE(gpu_->UploadConverted(next.data(), DType::kF32, res_b.t).ok());
          Poison(*gpu_, out_a.t);
          ASSERT_TRUE((*graph)->Replay().ok());
          ASSERT_TRUE(gpu_->AddRmsNorm(res_b.t, delta.t, norm_w.t, 1e-5f, normed_b.t).ok());
          ASSERT_TRUE(gpu_->Linear(normed_b.t, g.lw, out_b.t).ok());
          EXPECT_EQ(Bytes(*gpu_, out_a.t), Bytes(*gpu_, out_b.t)) << kernel << ", replayed";
        }
        gpu_->mutable_options().fuse_fp8_input_quant = false;
        EXPECT_FALSE(gpu_->TakesFp8Input(g.lw, 32));
        gpu_->mutable_options().fuse_fp8_input_quant = true;
      }
    }
  // A bad call is an error, not a crash: rows for which the weight takes no quantized input.
  const Fp8Weight q = Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, StorageFormat::Fp8(ScaleGranularity::kChannel));
  DeviceLinear g = Place(*gpu_, dtype_, q, n, k, {}, ActivationQuant::kDynamicPerToken, 0);
  OwnedTensor x = MakeTensor(*gpu_, dtype_, {2, k}), out = MakeTensor(*gpu_, dtype_, {2, n});
  OwnedTensor codes = MakeTensor(*gpu_, DType::kF8E4M3, {2, k}), scales = MakeTensor(*gpu_, DType::kF32, {2});
  EXPECT_FALSE(gpu_->LinearFp8Input(x.t, Fp8Input{codes.t, scales.t}, g.lw, out.t).ok());
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// --- FP8 KV cache ---

// QkvRope's arguments (full rotary, no q/k norms) over these tensors, the caches' scales 0.02 and
// 0.011 (used where they are E4M3).
QkvRopeArgs RopeArgs(Tensor qkv, int heads, int kv_heads, int head_dim, Tensor inv_freq, Tensor positions,
                     Tensor slots, Tensor k_cache, Tensor v_cache, Tensor q_out) {
  QkvRopeArgs a;
  a.qkv = qkv;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.rope.inv_freq = inv_freq;
  a.rope.rotary_dim = head_dim;
  a.positions = positions;
  a.slot_mapping = slots;
  a.cache = {k_cache, v_cache, 0.02f, 0.011f};
  a.q_out = q_out;
  return a;
}

TEST_P(CudaFp8Test, QkvRopeWritesTheCpusE4M3) {
  for (int head_dim : {64, 128, 80}) {
    const int t = 37, heads = 8, kv_heads = 2;
    const int64_t blocks = 8, block_size = 16, qkv_w = int64_t{heads + 2 * kv_heads} * head_dim;
    const std::vector<float> qkv = Rand(t * qkv_w, -3, 3);
    std::vector<float> inv(head_dim / 2);
    for (int i = 0; i < head_dim / 2; ++i) inv[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / head_dim));
    std::vector<int32_t> pos(t), slots(t);
    for (int i = 0; i < t; ++i) {
      pos[i] = static_cast<int32_t>(rng_() % 3000);
      slots[i] = i % 5 == 4 ? -1 : (i * 37) % (blocks * block_size);
    }
    const Shape cache_shape{blocks, kv_heads, block_size, head_dim};
    auto run = [&](Backend& b, DType act, OwnedTensor& k, OwnedTensor& v, Tensor q_out) {
      OwnedTensor tq = Upload(b, act, {t, qkv_w}, qkv), tinv = Upload(b, DType::kF32, {head_dim / 2}, inv);
      OwnedTensor tp = UploadI32(b, pos), ts = UploadI32(b, slots);
      const QkvRopeArgs a = RopeArgs(tq.t, heads, kv_heads, head_dim, tinv.t, tp.t, ts.t, k.t, v.t, q_out);
      ASSERT_TRUE(b.QkvRope(a).ok());
      ASSERT_TRUE(b.Synchronize().ok());
    };
    std::vector<uint8_t> zeros(cache_shape.numel(), 0);
    OwnedTensor gk = MakeTensor(*gpu_, DType::kF8E4M3, cache_shape), gv = MakeTensor(*gpu_, DType::kF8E4M3, cache_shape);
    OwnedTensor hk = MakeTensor(cpu_, DType::kF8E4M3, cache_shape), hv = MakeTensor(cpu_, DType::kF8E4M3, cache_shape);
    for (OwnedTensor* c : {&gk, &gv}) ASSERT_TRUE(gpu_->CopyToDevice(c->t, zeros.data()).ok());
    for (OwnedTensor* c : {&hk, &hv}) ASSERT_TRUE(cpu_.CopyToDevice(c->t, zeros.data()).ok());
    OwnedTensor gq = MakeTensor(*gpu_, dtype_, {t, heads * head_dim}), hq = MakeTensor(cpu_, DType::kF32, {t, heads * head_dim});
    run(*gpu_, dtype_, gk, gv, gq.t);
    run(cpu_, DType::kF32, hk, hv, hq.t);
    std::vector<uint8_t> gkb(cache_shape.numel()), gvb(cache_shape.numel());
    ASSERT_TRUE(gpu_->CopyToHost(gkb.data(), gk.t).ok());
    ASSERT_TRUE(gpu_->CopyToHost(gvb.data(), gv.t).ok());
    ASSERT_TRUE(gpu_->Synchronize().ok());
    const uint8_t* hkb = hk.t.data_as<uint8_t>();
    const uint8_t* hvb = hv.t.data_as<uint8_t>();
    EXPECT_EQ(0, std::memcmp(gvb.data(), hvb, gvb.size())) << "V bytes, head_dim " << head_dim;
    // K went through sincos and the rotation on both sides: an element may round to the
    // neighbouring E4M3 value, never further.
    int neighbours = 0;
    for (size_t i = 0; i < gkb.size(); ++i) {
      if (gkb[i] == hkb[i]) continue;
      ++neighbours;
      EXPECT_LE(std::abs(int(gkb[i] & 0x7f) - int(hkb[i] & 0x7f)), 1) << i;
      EXPECT_EQ(gkb[i] & 0x80, hkb[i] & 0x80) << i;
    }
    EXPECT_LT(neighbours, static_cast<int>(gkb.size() / 100)) << "head_dim " << head_dim;
    EXPECT_LE(RelErr(Download(*gpu_, gq.t), Download(cpu_, hq.t)), Tolerance(dtype_));
  }
}

// The QKV projection's end as RoPE and the KV write (Backend::LinearQkvRope): the FP8 register
// GEMV at one row by the rule (and forced at 2 and 4, one warp a row), with and without its
// input's norm, 16-bit and E4M3 caches, head_dim 64 and 128, a token whose slot is skipped: the
// query, the K and V caches bit for bit what the linear then QkvRope write. Q/K norms (Qwen3)
// and other rows run apart.
TEST_P(CudaFp8Test, QkvRopeFusedInTheGemv) {
  struct Case {
    int m, head_dim, wpr;
    bool norm, fp8_cache, qk_norm, fused;
  };
  const Case cases[] = {{1, 128, 0, true, true, false, true},   {1, 128, 0, false, false, false, true},
                        {1, 64, 0, true, false, false, true},   {2, 128, 1, true, true, false, true},
                        {4, 64, 1, false, true, false, true},   {1, 128, 0, true, true, true, false},
                        {2, 128, 0, true, false, false, false}, {12, 128, 0, false, true, false, false}};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.fp8_gemv_max_rows = 4;  // the H100's cut-overs, whatever runs the test
  o.gemm_few_rows_max_rows = 8;
  o.gemm_fp8_wgmma_max_rows = 32;
  o.fp8_w8a8_gemv_max_rows = 0;
  const int heads = 8, kv_heads = 2, k = 1024;
  for (const Case& c : cases) {
    o.autotune_linear = c.wpr == 0;
    o.gemv_warps_per_row = c.wpr;
    const int64_t n = int64_t{heads + 2 * kv_heads} * c.head_dim;
    const Fp8Weight qw = Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, StorageFormat::Fp8(ScaleGranularity::kChannel));
    DeviceLinear g = Place(*gpu_, dtype_, qw, n, k, Rand(n), ActivationQuant::kNone, 1.0f);
    testing::QkvRopeCase rc{c.m, heads, kv_heads, c.head_dim, c.norm, c.fp8_cache, c.qk_norm};
    testing::CheckFusedQkvRope(*gpu_, rng_, g.lw, rc, c.fused,
                               absl::StrCat("m ", c.m, " head_dim ", c.head_dim, " wpr ", c.wpr, c.norm ? " norm" : "",
                                            c.fp8_cache ? " e4m3 cache" : "", c.qk_norm ? " q/k norms" : ""));
  }
}

// cuBLASLt's raw sums with their scales applied by the op after the linear
// (CudaBackendOptions::fp8_pending_scales): QkvRope after the QKV projection on an input the norm
// quantized (Backend::LinearFp8InputQkvRope), and the residual add and RMSNorm after o_proj, with
// and without the next linear's quantized input (Backend::LinearAddRmsNorm). Per-channel and
// per-tensor weights, per-token and static inputs, with and without bias, both caches: every
// output bit (query, caches, residual, norm, codes, scales) what the ops apart write, in one
// kernel fewer; rows of the W8A8 GEMV and the warpgroup GEMM keep the ops apart.
TEST_P(CudaFp8Test, ScalesAppliedByTheOpAfterTheLinear) {
  CudaBackendOptions& o = gpu_->mutable_options();
  o.fp8_gemv_max_rows = 1;  // the H200's cut-overs, whatever runs the test: cuBLASLt from 17 rows
  o.gemm_few_rows_max_rows = 0;
  o.gemm_fp8_wgmma_max_rows = 16;
  o.fp8_w8a8_gemv_max_rows = 8;
  const int heads = 8, kv_heads = 2, k = 1024;
  auto bytes = [&](Tensor t) { return Bytes(*gpu_, t); };
  for (const StorageFormat& f :
       {StorageFormat::Fp8(ScaleGranularity::kChannel), StorageFormat::Fp8(ScaleGranularity::kTensor)})
    for (ActivationQuant a : {ActivationQuant::kDynamicPerToken, ActivationQuant::kStaticPerTensor})
      for (const int64_t m : {12, 40, 128, 200})
        for (const bool bias : {false, true}) {
          const bool pending_rows = m > 16;
          // Per-channel weights and per-token inputs (the online FP8 of --quantization fp8): cuBLASLt
          // takes these; for the others its rules decide (a refusal runs the ops apart).
          const bool common =
              f.granularity == ScaleGranularity::kChannel && a == ActivationQuant::kDynamicPerToken;
          const std::string what = absl::StrCat(f.ToString(), " input ", static_cast<int>(a), ", ", m,
                                                " rows", bias ? ", bias" : "");
          SCOPED_TRACE(what);
          // The QKV projection's end.
          for (const int head_dim : {64, 128}) {
            const bool fp8_cache = head_dim == 128;
            const int64_t n = int64_t{heads + 2 * kv_heads} * head_dim;
            DeviceLinear qkv_w = Place(*gpu_, dtype_, Quantize(RandomVec(rng_, n * k, -0.5f, 0.5f), n, k, f),
                                       n, k, bias ? Rand(n) : std::vector<float>{}, a, 3.0f / 448.0f);
            if (!gpu_->TakesFp8Input(qkv_w.lw, m)) continue;  // cuBLASLt refused the shape (its rules vary)
            const std::vector<float> residual = Rand(m * k, -2, 2);
            OwnedTensor res = Upload(*gpu_, dtype_, {m, k}, residual),
                        norm_w = Upload(*gpu_, dtype_, {k}, Rand(k, 0.5f, 1.5f));
            OwnedTensor normed = MakeTensor(*gpu_, dtype_, {m, k}), qkv = MakeTensor(*gpu_, dtype_, {m, n});
            OwnedTensor codes = MakeTensor(*gpu_, DType::kF8E4M3, {m, k}),
                        scales = MakeTensor(*gpu_, DType::kF32, {m});
            const Fp8Input input{codes.t, scales.t};
            ASSERT_TRUE(
                gpu_->AddRmsNormFp8(res.t, Tensor(), norm_w.t, 1e-5f, normed.t, qkv_w.lw, input).ok());
            std::vector<float> inv(head_dim / 2);
            for (int i = 0; i < head_dim / 2; ++i)
              inv[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / head_dim));
            std::vector<int32_t> pos(m), slots(m);
            const int64_t blocks = (m + 15) / 16 + 2, block_size = 16;
            for (int i = 0; i < m; ++i) {
              pos[i] = static_cast<int32_t>(rng_() % 3000);
              slots[i] = i == 1 ? -1 : i;
            }
            OwnedTensor tinv = Upload(*gpu_, DType::kF32, {head_dim / 2}, inv), tp = UploadI32(*gpu_, pos),
                        ts = UploadI32(*gpu_, slots);
            const DType cache_dt = fp8_cache ? DType::kF8E4M3 : dtype_;
            const Shape cache_shape{blocks, kv_heads, block_size, head_dim};
            auto run = [&](bool pending) {
              std::array<OwnedTensor, 3> out{MakeTensor(*gpu_, dtype_, {m, int64_t{heads} * head_dim}),
                                             MakeTensor(*gpu_, cache_dt, cache_shape),
                                             MakeTensor(*gpu_, cache_dt, cache_shape)};
              for (OwnedTensor& t : out) Poison(*gpu_, t.t);
              const QkvRopeArgs r = RopeArgs(qkv.t, heads, kv_heads, head_dim, tinv.t, tp.t, ts.t, out[1].t,
                                             out[2].t, out[0].t);
              o.fp8_pending_scales = pending;
              const bool fuses = gpu_->FusesFp8InputQkvRope(qkv_w.lw, r, m);
              if (!pending || !pending_rows) {
                EXPECT_FALSE(fuses) << head_dim;
              }
              if (pending && pending_rows && common) {
                EXPECT_TRUE(fuses) << head_dim;
              }
              gpu_->StartOpTiming();
              EXPECT_TRUE(gpu_->LinearFp8InputQkvRope(normed.t, input, qkv_w.lw, r).ok()) << head_dim;
              auto ops = gpu_->CollectOpTimings();
              EXPECT_TRUE(ops.ok());
              if (ops.ok() && fuses) {
                EXPECT_EQ(ops->size(), 1u) << head_dim;
                if (!ops->empty()) {
                  EXPECT_EQ(ops->front().op.rfind("LinearQkvRope", 0), 0u) << ops->front().op;
                }
              }
              return out;
            };
            const std::array<OwnedTensor, 3> fused = run(true), apart = run(false);
            for (int i = 0; i < 3; ++i)
              EXPECT_EQ(bytes(fused[i].t), bytes(apart[i].t))
                  << "qkv end, head_dim " << head_dim << ", output " << i;
          }
          // o_proj's end: the residual add and the MLP's norm, with and without the gate/up
          // projection's quantized input.
          const int64_t hidden = 768, ffn2 = 1024;
          DeviceLinear o_w =
              Place(*gpu_, dtype_, Quantize(RandomVec(rng_, hidden * k, -0.5f, 0.5f), hidden, k, f), hidden,
                    k, bias ? Rand(hidden) : std::vector<float>{}, a, 3.0f / 448.0f);
          DeviceLinear up_w =
              Place(*gpu_, dtype_, Quantize(RandomVec(rng_, ffn2 * hidden, -0.5f, 0.5f), ffn2, hidden, f),
                    ffn2, hidden, {}, a, 3.0f / 448.0f);
          const std::vector<float> x = Rand(m * k, -2, 2), residual = Rand(m * hidden, -2, 2);
          OwnedTensor tx = Upload(*gpu_, dtype_, {m, k}, x),
                      norm_w = Upload(*gpu_, dtype_, {hidden}, Rand(hidden, 0.5f, 1.5f));
          for (const bool quantize_out : {false, true}) {
            if (quantize_out && !gpu_->TakesFp8Input(up_w.lw, m)) continue;
            auto run = [&](bool pending) {
              std::array<OwnedTensor, 4> out{
                  Upload(*gpu_, dtype_, {m, hidden}, residual), MakeTensor(*gpu_, dtype_, {m, hidden}),
                  MakeTensor(*gpu_, DType::kF8E4M3, {m, hidden}), MakeTensor(*gpu_, DType::kF32, {m})};
              for (int i = 1; i < 4; ++i) Poison(*gpu_, out[i].t);
              OwnedTensor delta = MakeTensor(*gpu_, dtype_, {m, hidden});
              const Fp8Input q{out[2].t, out[3].t};
              o.fp8_pending_scales = pending;
              const bool fuses = gpu_->FusesLinearAddRmsNorm(o_w.lw, m);
              if (!pending || !pending_rows) {
                EXPECT_FALSE(fuses);
              }
              if (pending && pending_rows && common) {
                EXPECT_TRUE(fuses);
              }
              gpu_->StartOpTiming();
              EXPECT_TRUE(gpu_->LinearAddRmsNorm(tx.t, o_w.lw, out[0].t, delta.t, norm_w.t, 1e-5f, out[1].t,
                                                 up_w.lw, quantize_out ? &q : nullptr)
                              .ok());
              auto ops = gpu_->CollectOpTimings();
              EXPECT_TRUE(ops.ok());
              if (ops.ok() && fuses) {
                EXPECT_EQ(ops->size(), 1u);
                if (!ops->empty()) {
                  EXPECT_EQ(ops->front().op.rfind("LinearAddRmsNorm", 0), 0u) << ops->front().op;
                }
              }
              return out;
            };
            const std::array<OwnedTensor, 4> fused = run(true), apart = run(false);
            EXPECT_EQ(bytes(fused[0].t), bytes(apart[0].t)) << "residual";
            // With the quantized output the 16-bit one may be left unwritten (its consumer reads the codes).
            if (!quantize_out) {
              EXPECT_EQ(bytes(fused[1].t), bytes(apart[1].t)) << "normed";
            }
            if (quantize_out) {
              EXPECT_EQ(bytes(fused[2].t), bytes(apart[2].t)) << "codes";
              if (a == ActivationQuant::kDynamicPerToken) {
                EXPECT_EQ(bytes(fused[3].t), bytes(apart[3].t)) << "scales";
              }
            }
          }
        }
  // A bad call is an error, not a crash: pending scales where QkvRope cannot take them.
  cuda::QkvRopeParams bad;
  bad.num_tokens = 1;
  bad.num_heads = bad.num_kv_heads = 1;
  bad.head_dim = bad.rotary_dim = 80;
  bad.block_size = 16;
  float sums[4] = {};
  bad.pending.sums = sums;
  EXPECT_FALSE(cuda::LaunchQkvRope(dtype_, bad, nullptr).ok());
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

std::vector<std::pair<int, int>> RaggedDecodesThenPrefill() {
  std::vector<std::pair<int, int>> seqs = RaggedDecodes(40);
  seqs.push_back({48, 300});
  return seqs;
}

TEST_P(CudaFp8Test, AttentionReadsAnE4M3Cache) {
  struct Case {
    std::string name;
    std::vector<std::pair<int, int>> seqs;  // (query_len, context_len)
    int heads, kv_heads, head_dim;
  };
  const Case cases[] = {
      {"decode", {{1, 1}, {1, 17}, {1, 300}, {1, 1000}}, 8, 2, 128},
      {"decode_llama", {{1, 1024}, {1, 999}, {1, 64}, {1, 1}, {1, 513}, {1, 2}}, 32, 8, 128},
      {"decode_hd64", {{1, 700}, {1, 33}}, 8, 8, 64},
      {"prefill", {{100, 100}, {3, 3}}, 32, 8, 128},
      {"prefill_hd64", {{130, 130}}, 8, 8, 64},
      {"chunked_prefill", {{64, 1000}, {130, 700}}, 8, 2, 128},
      {"mixed", {{37, 37}, {1, 200}, {5, 70}}, 8, 2, 128},
      {"long_split", {{1, 8192}, {1, 3}}, 32, 8, 128},
      {"hd80_simt", {{1, 300}, {40, 90}}, 6, 2, 80},
      // Enough (sequence, KV head) blocks to fill the GPU, ragged contexts, then prefills behind the
      // decodes (a mixed step: the decode kernel takes the leading ones).
      {"decodes_fill_gpu_then_prefill",
       {{1, 700}, {1, 33}, {1, 1}, {1, 256}, {1, 257}, {1, 1000}, {1, 31}, {1, 64}, {1, 65}, {1, 500}, {1, 129},
        {1, 2}, {1, 300}, {1, 301}, {1, 17}, {1, 800}, {1, 96}, {1, 97}, {1, 640}, {1, 5}, {40, 40}, {64, 300}},
       32, 8, 128},
      {"group8_hd64", {{1, 333}, {1, 48}}, 16, 2, 64},
      // 40 decodes of 1-900 keys (320 blocks of 8 KV heads: a second wave), then a prefill behind
      // them.
      {"many_decodes_then_prefill", RaggedDecodesThenPrefill(), 32, 8, 128},
  };
  for (const Case& c : cases) {
    const int block_size = 16;
    int64_t blocks = 1, width = 1;
    for (auto [q, ctx] : c.seqs) {
      blocks += (ctx + block_size - 1) / block_size;
      width = std::max<int64_t>(width, (ctx + block_size - 1) / block_size);
    }
    std::vector<int32_t> perm(blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    std::vector<int32_t> qs{0}, ctxs, tables, positions;
    int next = 0, max_q = 0, max_ctx = 0;
    for (auto [q, ctx] : c.seqs) {
      const int nb = (ctx + block_size - 1) / block_size;
      for (int64_t b = 0; b < width; ++b) tables.push_back(b < nb ? perm[next + b] : -1);
      next += nb;
      for (int i = 0; i < q; ++i) positions.push_back(ctx - q + i);
      qs.push_back(qs.back() + q);
      ctxs.push_back(ctx);
      max_q = std::max(max_q, q);
      max_ctx = std::max(max_ctx, ctx);
    }
    const int64_t tokens = qs.back();
    const Shape cache_shape{blocks, c.kv_heads, block_size, c.head_dim};
    const float k_scale = 3.0f / 448.0f, v_scale = 1.5f / 448.0f;
    std::vector<uint8_t> kb(cache_shape.numel()), vb(cache_shape.numel());
    for (auto& b : kb) b = FloatToFp8E4M3(std::uniform_real_distribution<float>(-3, 3)(rng_) / k_scale);
    for (auto& b : vb) b = FloatToFp8E4M3(std::uniform_real_distribution<float>(-1.5, 1.5)(rng_) / v_scale);
    // The slots of each sequence's last page past its context hold NaN codes (a page's unwritten
    // slots may hold anything, e.g. a finished sequence's keys or uninitialized memory): no kernel
    // may let them into a result (a zero probability times NaN is NaN).
    {
      int first = 0;
      for (auto [q, ctx] : c.seqs) {
        const int nb = (ctx + block_size - 1) / block_size;
        const int64_t page = perm[first + nb - 1];
        for (int slot = ctx - (nb - 1) * block_size; slot < block_size; ++slot)
          for (int kvh = 0; kvh < c.kv_heads; ++kvh)
            for (int e = 0; e < c.head_dim; ++e) {
              const int64_t at = ((page * c.kv_heads + kvh) * block_size + slot) * c.head_dim + e;
              kb[at] = vb[at] = 0x7F;  // E4M3 NaN
            }
        first += nb;
      }
    }
    const std::vector<float> q = Rand(tokens * c.heads * c.head_dim, -2, 2);
    auto run = [&](Backend& b, DType act, CudaBackend* poison) {
      OwnedTensor k = MakeTensor(b, DType::kF8E4M3, cache_shape), v = MakeTensor(b, DType::kF8E4M3, cache_shape);
      EXPECT_TRUE(b.CopyToDevice(k.t, kb.data()).ok());
      EXPECT_TRUE(b.CopyToDevice(v.t, vb.data()).ok());
      OwnedTensor tq = Upload(b, act, {tokens, int64_t{c.heads} * c.head_dim}, q);
      OwnedTensor out = MakeTensor(b, act, {tokens, int64_t{c.heads} * c.head_dim});
      if (poison) Poison(*poison, out.t);
      OwnedTensor tqs = UploadI32(b, qs), tctx = UploadI32(b, ctxs), ttab = UploadI32(b, tables),
                  tpos = UploadI32(b, positions);
      StepMetadata meta;
      meta.num_tokens = static_cast<int32_t>(tokens);
      meta.num_seqs = static_cast<int32_t>(c.seqs.size());
      meta.max_query_len = max_q;
      meta.max_context_len = max_ctx;
      meta.positions = tpos.t;
      meta.query_start = tqs.t;
      meta.context_lens = tctx.t;
      meta.block_tables = ttab.t.Reshape({meta.num_seqs, width});
      while (meta.num_decode_seqs < meta.num_seqs && c.seqs[meta.num_decode_seqs].first == 1) ++meta.num_decode_seqs;
      AttentionArgs a;
      a.q = tq.t;
      a.num_heads = c.heads;
      a.num_kv_heads = c.kv_heads;
      a.head_dim = c.head_dim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      a.cache = {k.t, v.t, k_scale, v_scale};
      a.meta = &meta;
      a.out = out.t;
      const absl::Status st = b.Attention(a);
      EXPECT_TRUE(st.ok()) << st;
      return Download(b, out.t);
    };
    const std::vector<float> want = run(cpu_, DType::kF32, nullptr);
    for (int variant = 0; variant < 9; ++variant) {  // as cuda_ops_test: defaults, SIMT, SIMT split, split,
                                                     // the CUDA-core decode kernel unsplit and split,
                                                     // a mixed step's two kernels on one stream; then
                                                     // the tensor-core decode kernel with O untransposed,
                                                     // unsplit and split
      gpu_->mutable_options().force_simt_attention = variant == 1 || variant == 2;
      gpu_->mutable_options().attention_splits =
          variant == 2 || variant == 3 || variant == 5 || variant == 8 ? 7 : 0;
      gpu_->mutable_options().warp_decode_attention = variant == 4 || variant == 5;
      gpu_->mutable_options().serial_mixed_attention = variant == 6;
      gpu_->mutable_options().attention_fp8_transposed_o = variant < 7;
      EXPECT_LE(RelErr(run(*gpu_, dtype_, gpu_.get()), want), Tolerance(dtype_)) << c.name << " variant " << variant;
    }
  }
  gpu_->mutable_options().force_simt_attention = false;
  gpu_->mutable_options().attention_splits = 0;
  gpu_->mutable_options().warp_decode_attention = false;
  gpu_->mutable_options().serial_mixed_attention = false;
  gpu_->mutable_options().attention_fp8_transposed_o = true;
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFp8Test, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return testing::DTypeLabel(info.param); });

// --- whole models ---

// The FP8 fixtures on a bf16 GPU, teacher-forced, against the references, held to the CPU
// emulation of a bf16 W8A8 engine (rounding_backend.h with FP8 formats and emulated activation
// quantization) on the same fixture, with the error margins cuda_model_test gives bf16 engines.
// Top-1: the W8A8 emulation flips 12-26% of these fixtures' positions (near ties), and which near
// ties flip depends on the summation order: the same quantized operands summed by cuBLASLt or by
// the warpgroup GEMM (o and down of llama-fp8-tensor-kv at 17-64 rows, an H200) flipped 46 and 42
// positions. So the margin is the flip count's own spread, sqrt(flips), where the bf16 engines'
// margin is 3 flips (at 2-9 flips).
int Fp8TopOneMargin(const testing::LogitParity& emulated) {
  const int flips = emulated.positions - emulated.top1;
  return std::max(3, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(flips)))));
}

class CudaFp8FixtureTest : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(CudaFp8FixtureTest, TeacherForcedWithinTheEmulationsBand) {
  const std::string name = std::get<0>(GetParam());
  const bool fp8_kv = std::get<1>(GetParam());
  const std::string dir = testing::ModelDir(name);
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  // The emulation's float32 cache is rounded to bf16 by the RoundingBackend (a bf16 cache), or FP8.
  ModelRunnerOptions options = testing::ParityRunnerOptions();
  options.kv_cache_dtype = fp8_kv ? std::optional<DType>(DType::kF8E4M3) : std::nullopt;
  CpuBackendOptions emulate;
  emulate.num_threads = 0;
  emulate.emulate_fp8_activations = true;
  const unsigned points = testing::kRoundAll & ~testing::kRoundWeights;
  auto emulated_runner = ModelRunner::Create(
      *config, **ckpt, std::make_unique<testing::RoundingBackend>(DType::kBF16, points, config->vocab_size, true, emulate),
      nullptr, options);
  ASSERT_TRUE(emulated_runner.ok()) << emulated_runner.status();
  auto emulated = testing::TeacherForcedParity(**emulated_runner, name);
  ASSERT_TRUE(emulated.ok()) << emulated.status();
  CudaBackendOptions b;
  b.dtype = DType::kBF16;
  auto backend = CudaBackend::Create(b);
  ASSERT_TRUE(backend.ok()) << backend.status();
  options.kv_cache_dtype = fp8_kv ? DType::kF8E4M3 : DType::kBF16;
  auto runner = ModelRunner::Create(*config, **ckpt, std::move(*backend), nullptr, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->kv_shape().dtype, fp8_kv ? DType::kF8E4M3 : DType::kBF16);
  auto gpu = testing::TeacherForcedParity(**runner, name);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::printf("[fp8 parity] %-20s kv %-4s emulated: top-1 %.4f max %.3g mean %.3g | GPU: top-1 %.4f max %.3g mean %.3g\n",
              name.c_str(), fp8_kv ? "fp8" : "bf16", emulated->agreement(), emulated->max_err, emulated->mean_err(),
              gpu->agreement(), gpu->max_err, gpu->mean_err());
  EXPECT_LE(gpu->max_err, 1.25 * emulated->max_err);
  EXPECT_LE(gpu->mean_err(), 1.2 * emulated->mean_err());
  EXPECT_GE(gpu->agreement(),
            emulated->agreement() - static_cast<double>(Fp8TopOneMargin(*emulated)) / gpu->positions);
}

INSTANTIATE_TEST_SUITE_P(Fp8Fixtures, CudaFp8FixtureTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kFp8FixtureModels), ::testing::Bool()),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n + (std::get<1>(info.param) ? "_fp8_kv" : "_bf16_kv");
                         });

// --quantization fp8 --dummy-weights: the GPU draws the same E4M3 bytes as the host (the same
// Philox stream; where the GPU's fused multiply-add rounds a draw across a rounding boundary of
// E4M3, the neighbouring value).
TEST(CudaFp8DummyWeightsTest, GpuDrawMatchesHostDraw) {
  auto config = LoadModelConfig(testing::ModelDir("llama-tiny"));
  ASSERT_TRUE(config.ok());
  LoadOptions fp8;
  fp8.quantization = OnlineQuantization::kFp8;
  auto gpu = testing::MakeCuda(DType::kBF16);
  ASSERT_NE(gpu, nullptr);
  CpuBackend cpu(0);
  auto on_gpu = CreateDummyWeights(*config, ShardSpec{}, *gpu, 9, fp8);
  auto on_cpu = CreateDummyWeights(*config, ShardSpec{}, cpu, 9, fp8);
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
  const LinearWeight& g = (*on_gpu)->layers[1].down;
  const LinearWeight& h = (*on_cpu)->layers[1].down;
  ASSERT_EQ(g.format, StorageFormat::Fp8(ScaleGranularity::kChannel));
  std::vector<uint8_t> bytes(g.weight.numel());
  ASSERT_TRUE(gpu->CopyToHost(bytes.data(), g.weight).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  int neighbours = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int a = bytes[i], b = h.weight.data_as<uint8_t>()[i];
    if (a == b) continue;
    ++neighbours;
    EXPECT_LE(std::abs((a & 0x7f) - (b & 0x7f)), 1) << i;
  }
  EXPECT_LE(neighbours, static_cast<int>(bytes.size() / 1000));
  EXPECT_EQ(Download(*gpu, g.scale), Download(cpu, h.scale));
}

}  // namespace
}  // namespace llm
