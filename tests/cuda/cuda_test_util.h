// Helpers for testing CUDA backend ops against the float32 CPU backend: random inputs rounded to
// the device dtype (so both sides see the same values), upload/download, poisoning and error norms.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace llm::testing {

// ‖a − b‖ / ‖b‖, NaN-aware (any NaN in `a` gives +inf).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Error bands (METHOD.md): float32 arithmetic far under 1e-3, bf16 operands 1e-3..1e-2.
inline double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 3e-3;
    default: return 1.2e-2;
  }
}

inline std::vector<float> RandomVec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Rounds float values to `t` and back, in place.
inline void RoundTo(DType t, std::vector<float>& v) {
  if (t == DType::kF32) return;
  std::vector<uint16_t> tmp(v.size());
  ConvertFromFloat(v.data(), t, tmp.data(), v.size());
  ConvertToFloat(t, tmp.data(), v.data(), v.size());
}

// An owned tensor on some backend.
struct OwnedTensor {
  Buffer buffer;
  Tensor t;
};

inline OwnedTensor MakeTensor(Backend& b, DType dtype, Shape shape) {
  auto buf = b.Allocate(static_cast<size_t>(shape.numel()) * DTypeSize(dtype) + 16);
  EXPECT_TRUE(buf.ok()) << buf.status();
  OwnedTensor o{std::move(*buf), {}};
  o.t = o.buffer.View(dtype, shape);
  return o;
}

// Uploads float values converted to the tensor's dtype.
inline OwnedTensor Upload(Backend& b, DType dtype, Shape shape, const std::vector<float>& v) {
  OwnedTensor o = MakeTensor(b, dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel());
  EXPECT_TRUE(b.UploadConverted(v.data(), DType::kF32, o.t).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  return o;
}

inline OwnedTensor UploadI32(Backend& b, const std::vector<int32_t>& v) {
  OwnedTensor o = MakeTensor(b, DType::kI32, Shape{static_cast<int64_t>(std::max<size_t>(v.size(), 1))});
  o.t = o.t.Rows(0, static_cast<int64_t>(v.size()));
  if (!v.empty()) {
    EXPECT_TRUE(b.CopyToDevice(o.t, v.data()).ok());
  }
  EXPECT_TRUE(b.Synchronize().ok());
  return o;
}

inline std::vector<float> Download(Backend& b, Tensor t) {
  std::vector<float> out(t.numel());
  if (t.dtype() == DType::kF32) {
    EXPECT_TRUE(b.CopyToHost(out.data(), t).ok());
    EXPECT_TRUE(b.Synchronize().ok());
    return out;
  }
  std::vector<uint16_t> raw(t.numel());
  EXPECT_TRUE(b.CopyToHost(raw.data(), t).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  ConvertToFloat(t.dtype(), raw.data(), out.data(), out.size());
  return out;
}

// NaN in every element (0xFFFF.. is a NaN in f32, f16 and bf16): unwritten outputs show.
inline void Poison(CudaBackend& b, Tensor t) { ASSERT_TRUE(b.FillPattern(t, 0xFFFFFFFFu).ok()); }

inline std::string DTypeLabel(DType t) { return std::string(DTypeName(t)); }

// (query_len, context_len) of `n` one-token sequences of 1-900 keys, ragged: with 8 KV heads, 40 of
// them are more decode-attention blocks than two an SM hold (a second wave).
inline std::vector<std::pair<int, int>> RaggedDecodes(int n) {
  std::vector<std::pair<int, int>> seqs;
  for (int i = 0; i < n; ++i) seqs.push_back({1, 1 + (i * 397) % 900});
  return seqs;
}

inline std::unique_ptr<CudaBackend> MakeCuda(DType dtype, CudaBackendOptions options = {}) {
  options.dtype = dtype;
  auto b = CudaBackend::Create(options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// Backend::LinearSiluMul of x [m, K] and a gate/up weight [2F, K] on `gpu`, fused (its op label
// "LinearSiluMul ..." where `want_fused`) and with the fusion off (Linear, then SiluMul: the
// kernels the CPU oracle is held to elsewhere): the same values bit for bit. Returns the fused
// output [m, F] for the caller to hold to the CPU.
inline std::vector<float> CheckLinearSiluMul(CudaBackend& gpu, Tensor x, const LinearWeight& w, int64_t m,
                                             bool want_fused, const std::string& what) {
  const DType dt = gpu.activation_dtype();
  const int64_t n = w.out_features(), f = n / 2;
  OwnedTensor scratch = MakeTensor(gpu, dt, {m, n}), fused = MakeTensor(gpu, dt, {m, f});
  OwnedTensor plain = MakeTensor(gpu, dt, {m, f});
  Poison(gpu, fused.t);
  Poison(gpu, plain.t);
  const bool was = gpu.options().fuse_gate_up_silu;
  gpu.mutable_options().fuse_gate_up_silu = true;
  gpu.StartOpTiming();
  absl::Status st = gpu.LinearSiluMul(x, w, scratch.t, fused.t);
  EXPECT_TRUE(st.ok()) << st << " " << what;
  auto ops = gpu.CollectOpTimings();
  EXPECT_TRUE(ops.ok() && !ops->empty()) << what;
  if (ops.ok() && !ops->empty()) {
    EXPECT_EQ(ops->front().op.rfind("LinearSiluMul", 0) == 0, want_fused) << what << ": ran " << ops->front().op;
  }
  gpu.mutable_options().fuse_gate_up_silu = false;
  st = gpu.LinearSiluMul(x, w, scratch.t, plain.t);
  EXPECT_TRUE(st.ok()) << st << " " << what;
  gpu.mutable_options().fuse_gate_up_silu = was;
  const std::vector<float> got = Download(gpu, fused.t), want = Download(gpu, plain.t);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += !(got[i] == want[i]);
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " outputs differ from Linear + SiluMul";
  return got;
}

}  // namespace llm::testing
