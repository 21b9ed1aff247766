// A CPU backend that emulates CUDA graphs: BeginCapture..EndCapture records each op as a closure
// and Replay runs them again with the same arguments and addresses, new contents; host copies
// while capturing are errors, as in a real capture. Lets the graph decode path (bucketing,
// padding, fixed-address metadata, capture after an eager run) be checked without a GPU.
// RecordingCommunicator does the same for a communicator's operations, as NCCL's enqueued
// collectives are recorded into a graph.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "parallel/communicator.h"

namespace llm::testing {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(int threads) : cpu_(threads) {}
  explicit RecordingBackend(const CpuBackendOptions& options) : cpu_(options) {}
  int captures = 0, replays = 0;
  // Ops that wrote a linear's input quantized (Backend::Fp8Input), and Linear calls that took one.
  int fp8_inputs_written = 0, fp8_input_linears = 0;
  // Tuning passes (Backend::SetTuningPass) seen, and Linear calls run inside one.
  int tuning_passes = 0, linears_while_tuning = 0;

  Device device() const override { return cpu_.device(); }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }
  absl::StatusOr<Buffer> Allocate(size_t bytes) override { return cpu_.Allocate(bytes); }
  absl::StatusOr<size_t> FreeMemory() const override { return cpu_.FreeMemory(); }
  absl::Status CopyToDevice(Tensor dst, const void* src) override {
    if (recording_) return absl::FailedPreconditionError("copy while capturing");
    return cpu_.CopyToDevice(dst, src);
  }
  absl::Status CopyToHost(void* dst, Tensor src) override { return cpu_.CopyToHost(dst, src); }
  absl::Status UploadConverted(const void* src, DType t, Tensor dst) override { return cpu_.UploadConverted(src, t, dst); }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Embedding(Tensor table, Tensor ids, int64_t off, Tensor out) override {
    return Do([=, this] { return cpu_.Embedding(table, ids, off, out); });
  }
  absl::Status RmsNorm(Tensor x, Tensor w, float eps, Tensor out) override {
    return Do([=, this] { return cpu_.RmsNorm(x, w, eps, out); });
  }
  absl::Status AddRmsNorm(Tensor r, Tensor d, Tensor w, float eps, Tensor out) override {
    return Do([=, this] { return cpu_.AddRmsNorm(r, d, w, eps, out); });
  }
  absl::Status Add(Tensor x, Tensor y) override { return Do([=, this] { return cpu_.Add(x, y); }); }
  absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) override {
    if (tuning_) ++linears_while_tuning;
    return Do([=, this] { return cpu_.Linear(x, w, out); });
  }
  absl::Status QkvRope(const QkvRopeArgs& a) override { return Do([=, this] { return cpu_.QkvRope(a); }); }
  absl::Status Attention(const AttentionArgs& a) override { return Do([=, this] { return cpu_.Attention(a); }); }
  absl::Status SiluMul(Tensor gu, Tensor out) override { return Do([=, this] { return cpu_.SiluMul(gu, out); }); }
  absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) override {
    return Do([=, this] { return cpu_.GatherRows(x, rows, out); });
  }
  bool TakesFp8Input(const LinearWeight& w, int64_t rows) const override { return cpu_.TakesFp8Input(w, rows); }
  // The decoder's fused norm, residual and QKV-RoPE path as on the CPU backend; the ops it then
  // calls (Backend's RmsNormLinear, LinearAddInto and LinearQkvRope run RmsNorm, Linear, Add and
  // QkvRope) are recorded.
  bool FusesRmsNormInto(const LinearWeight& w, int64_t rows) const override { return cpu_.FusesRmsNormInto(w, rows); }
  bool AddsIntoResidual(const LinearWeight& w, int64_t rows) const override { return cpu_.AddsIntoResidual(w, rows); }
  bool FusesQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const override {
    return cpu_.FusesQkvRope(w, rope, rows);
  }
  absl::Status AddRmsNormFp8(Tensor r, Tensor d, Tensor w, float eps, Tensor out, const LinearWeight& consumer,
                             Fp8Input q) override {
    ++fp8_inputs_written;
    return Do([=, this] { return cpu_.AddRmsNormFp8(r, d, w, eps, out, consumer, q); });
  }
  absl::Status SiluMulFp8(Tensor gu, Tensor out, const LinearWeight& consumer, Fp8Input q) override {
    ++fp8_inputs_written;
    return Do([=, this] { return cpu_.SiluMulFp8(gu, out, consumer, q); });
  }
  absl::Status LinearFp8Input(Tensor x, Fp8Input q, const LinearWeight& w, Tensor out) override {
    ++fp8_input_linears;
    return Do([=, this] { return cpu_.LinearFp8Input(x, q, w, out); });
  }
  absl::Status EnqueueSample(const SampleArgs& args) override { return cpu_.EnqueueSample(args); }
  absl::Status ReadSampleResults(int slot, absl::Span<SampleResult> results) override {
    return cpu_.ReadSampleResults(slot, results);
  }
  absl::Status ResolvePendingTokens(Tensor ids, Tensor sampled) override {
    return cpu_.ResolvePendingTokens(ids, sampled);
  }

  bool SupportsLinearFormat(const StorageFormat& f) const override { return cpu_.SupportsLinearFormat(f); }
  bool SupportsKvCacheDType(DType t) const override { return cpu_.SupportsKvCacheDType(t); }
  bool SupportsGraphs() const override { return true; }
  void SetTuningPass(bool on) override {
    if (on && !tuning_) ++tuning_passes;
    tuning_ = on;
  }
  bool recording() const { return recording_; }
  // Runs `op` now, or records it for every replay while capturing (what a graph does with an
  // enqueued kernel or a device-side collective).
  using Op = std::function<absl::Status()>;
  absl::Status Do(Op op) {
    if (recording_) {
      ops_.push_back(std::move(op));
      return absl::OkStatus();
    }
    return op();
  }
  absl::Status BeginCapture() override {
    // A tuning pass times kernels eagerly: it must end before a capture starts.
    if (tuning_) return absl::FailedPreconditionError("capture inside a tuning pass");
    recording_ = true;
    ops_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override {
    recording_ = false;
    ++captures;
    return std::unique_ptr<StepGraph>(new Graph(std::move(ops_), &replays));
  }

 private:
  class Graph final : public StepGraph {
   public:
    Graph(std::vector<Op> ops, int* replays) : ops_(std::move(ops)), replays_(replays) {}
    absl::Status Replay() override {
      ++*replays_;
      for (const Op& op : ops_) RETURN_IF_ERROR(op());
      return absl::OkStatus();
    }

   private:
    std::vector<Op> ops_;
    int* replays_;
  };

  CpuBackend cpu_;
  bool recording_ = false, tuning_ = false;
  std::vector<Op> ops_;
};

// Wraps a host communicator: while `backend` captures, operations are recorded into the graph
// and run at each replay; otherwise they run at once.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(Communicator& inner, RecordingBackend& backend) : inner_(inner), backend_(backend) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  bool CapturableInGraph() const override { return true; }
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    return backend_.Do([=, this] { return inner_.AllReduceSum(data, count, dtype); });
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    return backend_.Do([=, this] { return inner_.AllGather(send, recv, count, dtype); });
  }
  absl::Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    return backend_.Do([=, this] { return inner_.Broadcast(data, count, dtype, root); });
  }
  absl::Status Send(const void* data, size_t count, DType dtype, int peer) override {
    return backend_.Do([=, this] { return inner_.Send(data, count, dtype, peer); });
  }
  absl::Status Recv(void* data, size_t count, DType dtype, int peer) override {
    return backend_.Do([=, this] { return inner_.Recv(data, count, dtype, peer); });
  }

 private:
  Communicator& inner_;
  RecordingBackend& backend_;
};

}  // namespace llm::testing
