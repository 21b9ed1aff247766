// CudaBackend: every Backend op on one NVIDIA GPU (Hopper first), bf16/fp16 weights and
// activations with float32 accumulation (float32 too, for tests). Kernels live in kernels/cuda;
// this class checks Tensor shapes/dtypes on the host, unpacks them into plain launcher arguments
// and launches on its one stream. CUDA headers stay out of this header.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/device_arena.h"
#include "kernels/cuda/quant/fp8_quantize.h"
#include "kernels/cuda/rope/qkv_rope.h"

struct CUstream_st;

namespace llm {

struct LinearContext;  // linear_kernels.h
struct LinearCall;     // linear_kernels.h

struct CudaBackendOptions {
  int device_index = 0;
  DType dtype = DType::kBF16;  // weights, activations and KV cache
  // The device memory arena reserved at creation, as a fraction of the device's total memory in
  // (0, 1] (vLLM's gpu_memory_utilization; --gpu-memory-fraction), capped at what is free then less
  // DeviceArenaOptions::headroom_bytes. Every Allocate, and the workspaces below, are carved from it,
  // and FreeMemory() is what it has left: ModelRunner's KV cache, sized last, takes
  // kv_cache_fraction of the arena that weights, activations and workspaces leave. The rest of the
  // device is left to the CUDA context, cuBLASLt, NCCL, CUDA graphs and start-up staging.
  double memory_fraction = 0.9;
  size_t gemm_workspace_bytes = size_t{32} << 20;
  // FP8 linears on cuBLASLt: the activations quantized to E4M3 and their scales, a chunk of rows
  // at a time (32 MiB: 2048 rows of Llama-3-8B's widest input, 14336 columns, in one chunk). Int4
  // linears with act-order use it for their inputs in storage-column order (1170 rows of 14336).
  size_t fp8_workspace_bytes = size_t{32} << 20;
  size_t attention_workspace_bytes = size_t{32} << 20;  // bounds the decode split-K partials
  // Linear with M <= this may take the GEMV kernel (timed per shape against cuBLASLt, see
  // autotune_linear), else cuBLASLt (0: never; at most cuda::kGemvMaxRows). The GEMV re-reads x
  // from L1 for every weight vector, which stops paying off past a few rows: on an H100 at 8 rows
  // cuBLASLt took every 8B shape in about half the GEMV's time (LLM_LOG_LINEAR_CHOICE).
  int gemv_max_rows = 4;
  // With autotune_linear off: a GEMV form forced for every linear it may take, its warps per row
  // or kGemvRingForm (0: the ring where gemv_smem_ring takes it, else the GEMV's own choice).
  static constexpr int kGemvRingForm = -1;
  int gemv_warps_per_row = 0;
  // Every linear of M <= gemv_ring_max_rows that the GEMV's shared-memory ring form fits
  // (cuda::GemvRingFits) takes that form, untimed; the timed choice (autotune_linear) or the
  // GEMV's own rule covers the rest. The ring streams up to ~200 KB an SM of weights by bulk copies during
  // the kernels before it (attention, all-reduce, norm) and lets the next linear start its own
  // stream as soon as its copies are issued, so DRAM stays busy across the small kernels:
  // H100, 8B batch-1 step 6.03 -> 5.50 ms (benchmarks/RESULTS.md). Mixed with the register forms
  // (whose successors launch only after their whole stream) it was slower than either alone, and
  // a per-shape timing after one norm cannot see that, so it is not a candidate there.
  // LLM_GEMV_SMEM_RING=0 turns it off; LLM_GEMV_RING_KB sets gemv_ring_bytes.
  bool gemv_smem_ring = true;
  // Up to 2 rows: at 2 the ring about ties cuBLASLt in isolation and wins in the step (H100 8B
  // batch 2: 6.11-6.14 against 6.50-6.79 ms); at 4 cuBLASLt beats both GEMV forms by 30-45% on
  // every 8B shape (gemv_bench --rows 4; the ring re-reads and converts x for every weight
  // vector) and the step is 33% slower with the ring.
  int gemv_ring_max_rows = 2;
  size_t gemv_ring_bytes = 0;  // per block; 0: all the shared memory x and the partial sums leave
  // For Linear calls that may take the GEMV (M <= gemv_max_rows): time the GEMV (each number of
  // warps per row) against cuBLASLt on the first eager call of each shape (M, N, K, output dtype,
  // bias) and keep the fastest. The
  // winner depends on the GPU and the shape: on an H100 the GEMV is faster at batch 1, on an H200
  // cuBLASLt (4.76 against 5.19 ms per 8B decode step), and tensor-parallel shards are smaller
  // still. false: always the GEMV up to gemv_max_rows.
  bool autotune_linear = true;
  // Linears that take cuBLASLt with M <= this (decode steps): in the eager step before a graph
  // capture (Backend::SetTuningPass), time cuBLASLt's first heuristic picks on the call's operands
  // and keep the fastest for the shape (CublasLtGemm::Tune). 0: the heuristic's first pick
  // (LLM_TUNE_CUBLAS=0 sets that).
  int tune_cublas_max_rows = 256;
  // The row cut-overs below that are kByDevice by default depend on the GPU's DRAM bandwidth
  // (LinearKernels resolves them: linear_kernels.cc, RowCutoversFor). The widening kernels (few-rows
  // GEMM, W8A16) are bound by their instructions, so the faster the memory, the earlier the
  // warpgroup GEMMs win: measured on an H100 (3.35 TB/s) and an H200 (4.8 TB/s).
  static constexpr int kByDevice = -1;
  // FP8 weights: the GEMV forms up to min(gemv_max_rows, this) rows, the GEMMs above. By
  // measurement (8B FP8 step, benchmarks/RESULTS.md): on an H100 the tensor-core ring GEMV up to
  // gemv_max_rows (no limit of its own); on an H200 the warpgroup GEMM is 7% faster at 2 rows and
  // 18% at 3-4 (7% slower at one row), so 1 there. LLM_FP8_GEMV_MAX_ROWS=N.
  int fp8_gemv_max_rows = kByDevice;
  // FP8 weights with one scale a row, above the GEMV's rows and up to this many (at most
  // GemmFewRowsMaxRows: 64): the tensor-core GEMM for a few rows (gemm_few_rows.h, W8A16) instead of
  // the warpgroup GEMM or cuBLASLt's W8A8 GEMM. By measurement (8B FP8 step, benchmarks/RESULTS.md):
  // on an H100 batch 8 -13.5% against cuBLASLt and level with the warpgroup GEMM, so 8; on an H200
  // the warpgroup GEMM is 20% faster at batches 5 and 8, so 0 there. 0: none (LLM_GEMM_FEW_ROWS=N).
  int gemm_few_rows_max_rows = kByDevice;
  // FP8 linears that quantize x per token or per tensor (W8A8), with one weight scale a row or a
  // tensor, above the few-rows GEMM's rows and up to this many (at most cuda::kGemmFp8WgmmaMaxRows:
  // 64): the warpgroup GEMM (gemm_fp8_wgmma.h) instead of cuBLASLt's FP8 GEMM. By measurement (8B
  // FP8 step, benchmarks/RESULTS.md): on an H100 batch 16 -5% against the few-rows GEMM, 32 -4%
  // against cuBLASLt, and with its two-stage ring (sixteenth session) batch 48 / 64 still +0.7% /
  // +1.0%, so 32; on an H200 batch 48 / 64 -2.8% / -2.6%, so 64 then. 0: cuBLASLt (LLM_GEMM_FP8_WGMMA=N).
  // Those were against cuBLASLt's per-token x per-channel form. Against its raw-sums form (since
  // the twenty-fourth session) an H200 step is faster with 16 here (the 32-row graph -1.2%, the
  // 64-row graph -9.5%), so 16 there; the H100's 32 predates that form (cutovers_device.sh
  // compares 16 and 32 there).
  int gemm_fp8_wgmma_max_rows = kByDevice;
  // FP8 linears that quantize x per token or per tensor (W8A8), with one weight scale a row or a
  // tensor, from fp8_w8a8_gemv_min_rows to this many rows (at most cuda::kGemvFp8W8A8MaxRows: 16):
  // the W8A8 GEMV (gemv_fp8_w8a8.h) before any other FP8 kernel. By measurement (8B FP8 step,
  // benchmarks/RESULTS.md, twenty-sixth session): on an H200 against the warpgroup GEMM batch 2
  // -3.6%, 3-4 -1.5%, 5-8 level (+-0.6%), 9-16 slower (two token tiles), so 8 there; on an H100 not
  // measured (cutovers_device.sh compares it), so 0. 0: none (LLM_FP8_W8A8_GEMV=N).
  int fp8_w8a8_gemv_max_rows = kByDevice;
  // One row keeps the W8A16 register GEMV, which takes the norm, RoPE, SiLU and the residual add
  // into its kernels (the W8A8 GEMV fuses none: batch 1 +7% with it on an H200).
  // LLM_FP8_W8A8_GEMV_MIN=N.
  int fp8_w8a8_gemv_min_rows = 2;
  // The same for 16-bit weights; 0 by measurement (an H100 8B step at batch 8 ties cuBLASLt, at 32
  // and 64 it is 5-12% slower: benchmarks/RESULTS.md). LLM_GEMM_FEW_ROWS_16BIT.
  int gemm_few_rows_16bit_max_rows = 0;
  // Int4 weights with regular groups (whole 128-column units in column order) from
  // gemm_few_rows_int4_min_rows to gemm_few_rows_int4_max_rows rows (at most 128): the few-rows
  // GEMM (W4A16) instead of the tensor-core GEMV or the widened GEMM. On an H100 it beat the GEMV
  // at 17-32 rows (batch 32 7.55 -> 6.10 ms) before the GEMV read x in fragment order (its linears
  // 1.5-2x faster at 17-32 rows on an H200, where that GEMV now beats the warpgroup GEMM: batch 24
  // 4.88 -> 4.69 ms, 32 5.11 -> 4.95); so off (33) until an H100 says otherwise
  // (benchmarks/cuda/cutovers_device.sh). LLM_GEMM_FEW_ROWS_INT4=MIN,MAX.
  int gemm_few_rows_int4_min_rows = 33;
  int gemm_few_rows_int4_max_rows = 128;
  // Int4 weights with regular groups from gemm_w4a16_wgmma_min_rows to gemm_w4a16_wgmma_max_rows
  // rows: the warpgroup GEMM (gemm_w4a16_wgmma.h; 128 rows a pass), before the few-rows GEMM and
  // the GEMV. By measurement on an H100 (8B int4 step at 1k context, benchmarks/RESULTS.md):
  // batch 48 8.84 -> 6.99 ms, 64 9.52 -> 7.68, 128 15.71 -> 12.11, 256 (against the widened GEMM)
  // 28.05 -> 23.21, 320 / 384 / 448 31.92 / 35.58 / 41.95 -> 30.08 / 34.38 / 41.18 (passes of 128
  // rows, each reading the codes again: the margin shrinks); at 32 rows the few-rows GEMM stays
  // faster (5.96 against 6.34), so 33; on an H200 the GEMV with x in fragment order is faster at
  // 24-32 rows (4.69 / 4.95 against 4.88 / 5.11 ms), so 33 there too. LLM_GEMM_W4A16_WGMMA=MIN,MAX
  // (MIN > MAX: off).
  int gemm_w4a16_wgmma_min_rows = 33;
  int gemm_w4a16_wgmma_max_rows = 448;
  int gemm_few_rows_tile_rows = 0;  // 128 or 256; 0: the kernel's rule
  int gemm_few_rows_step_cols = 0;  // 128 or 256; 0: the kernel's rule
  int gemm_few_rows_token_split = 0;  // int4: warps an m16 tile, 1 or 2; 0: the kernel's rule
  int tune_cublas_candidates = 8;  // how many of the heuristic's picks are timed (at most 32)
  // Programmatic dependent launch for the GEMV (its weight prefetch overlaps the previous op) and
  // the small per-layer kernels (norm, RoPE/KV write, decode attention, SiLU: their launch
  // overlaps the previous kernel's tail). The NVLink all-reduce kernels always use it.
  bool programmatic_launch = true;
  // FP8 linears that run W8A8 on an input quantized per token or per tensor (the warpgroup GEMM,
  // cuBLASLt's FP8 GEMM) get that input quantized by the RMSNorm or SiLU-and-mul kernel that
  // writes it (Backend::TakesFp8Input), instead of a quantizing kernel reading it again
  // (LLM_FP8_FUSED_QUANT=0: off).
  bool fuse_fp8_input_quant = true;
  // cuBLASLt's W8A8 GEMMs with per-tensor or per-channel x per-token scales (prefill, 64+ rows)
  // sum in the tensor cores' accumulator over the whole K (cuda::Fp8GemmArgs::fast_accumulation),
  // as vLLM's and TensorRT-LLM's FP8 GEMMs do. On an H100 (benchmarks/RESULTS.md): the 8B FP8
  // prefill of 2048 tokens 34.6 -> 32.4 ms, decode at 512 rows 21.5 -> 20.9 ms; the cost, against
  // float32 sums of the same E4M3 operands (cuda_fp8_test), 0.20% / 0.31% relative error at K 4096 /
  // 14336 with bf16 outputs (0.17% of it the output's own rounding), a tenth of what the
  // activations' E4M3 rounding moves the outputs. The 128 x 128 block forms and the warpgroup GEMM
  // promote regardless (LLM_FP8_FAST_ACCUM=0: off).
  bool fp8_fast_accumulation = true;
  // FP8 linears on cuBLASLt with at most 8192 outputs and 65-256 rows (linear_kernels.cc's
  // Fp8SumsSlot): cuBLASLt's per-tensor scale form (raw float32 sums; split-K
  // algorithms) and a kernel applying the per-token and per-channel scales, instead of its
  // per-token x per-channel form, whose one algorithm's tiles leave most SMs idle there (H200, in a
  // graph, 128 rows: down 36.8 -> 24.2 us, o 13.8 -> 8.6, qkv 14.1 -> 10.2, before the scales'
  // kernel; benchmarks/RESULTS.md). LLM_FP8_SPLIT_SCALES=0: off.
  bool fp8_split_scales = true;
  // Under fp8_split_scales, where the kernel after the linear reads its output (QkvRope after the
  // QKV projection, the residual add and RMSNorm after o_proj: Backend::LinearFp8InputQkvRope,
  // LinearAddRmsNorm), that kernel applies the scales to the raw sums itself, instead of a pass of
  // their own (LLM_FP8_PENDING_SCALES=0: off).
  bool fp8_pending_scales = true;
  // LinearSiluMul runs the gate/up projection and SiLU-and-mul as one kernel where the linear's
  // kernel has that form (the register GEMVs of decode: 16-bit, FP8, int4): one kernel boundary
  // less a layer (LLM_FUSE_GATE_UP_SILU=0: off).
  bool fuse_gate_up_silu = true;
  // The FP8 and int4 register GEMVs of decode take the ops around them where their form allows
  // (LinearKernels::Fuses): the RMSNorm of their input where their grid is one wave
  // (Backend::RmsNormLinear), and then the residual add of the linear before (LinearAddInto), and
  // the QKV projection's RoPE and KV write (LinearQkvRope): up to three kernels, with their
  // launches and dependency waits, less a layer, the same bits. H200, 8B step at batch 1
  // (benchmarks/RESULTS.md): FP8 -2.1%, int4 -0.8% (LLM_FUSE_DECODE_OPS=0: off).
  bool fuse_decode_ops = true;
  // Under fuse_decode_ops, each fusion apart (tests and benchmarks): the input's norm (and with it
  // the residual add of the linear before; LLM_FUSE_GEMV_NORM=0/1) and the QKV-RoPE end
  // (LLM_FUSE_GEMV_ROPE=0/1).
  bool fuse_gemv_norm = true;
  bool fuse_gemv_rope = true;
  // Under fuse_gemv_norm, the int4 GEMV at 9-32 rows (x reordered into fragment order first): the
  // norm formed by the reordering kernel, the residual add by the GEMV (LLM_FUSE_REORDERED_NORM=0:
  // the norm kernel, the plain reordering and the add apart, as at 33 rows and more).
  bool fuse_reordered_norm = true;
  // Test knobs.
  bool force_simt_attention = false;
  int attention_splits = 0;  // > 0: fixed decode split count (LLM_ATTENTION_SPLITS)
  // > 0: the tensor-core decode kernel's blocks an SM (AttentionOptions::decode_blocks_per_sm;
  // LLM_ATTENTION_BLOCKS_PER_SM).
  int attention_blocks_per_sm = 0;
  // Decode attention over an FP8 cache with O kept transposed (AttentionOptions::decode_fp8_transposed_o;
  // LLM_ATTENTION_FP8_OT=0: as the 16-bit cache keeps it).
  bool attention_fp8_transposed_o = true;
  bool warp_decode_attention = false;  // the CUDA-core decode kernel instead of the tensor-core one
  bool serial_mixed_attention = false; // a mixed step's prefill attention after its decode attention, one stream
};

// One op's device time, from CUDA events around it, with the bytes and FLOPs it must at least
// move/do (estimates from the shapes; attention assumes every sequence at max_context_len).
struct OpTiming {
  std::string op;
  float ms = 0.0f;
  double bytes = 0.0;
  double flops = 0.0;
};

class CudaBackend final : public Backend {
 public:
  // Unavailable when there is no usable GPU; InvalidArgument for a non-floating dtype or a
  // memory_fraction outside (0, 1]; ResourceExhausted when the arena cannot be reserved.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  Device device() const override;
  DType activation_dtype() const override;

  // Carves from the device arena; ResourceExhausted (naming the arena's sizes, the device and the
  // flags that make room) when no free block is large enough.
  absl::StatusOr<Buffer> Allocate(size_t bytes) override;
  // The arena's largest free block: the largest Allocate that can succeed now.
  absl::StatusOr<size_t> FreeMemory() const override;
  absl::Status CopyToDevice(Tensor dst, const void* src) override;
  absl::Status CopyToHost(void* dst, Tensor src) override;
  absl::Status UploadConverted(const void* src, DType src_dtype, Tensor dst) override;
  absl::Status Synchronize() override;

  absl::Status Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) override;
  absl::Status RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) override;
  absl::Status AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) override;
  absl::Status Add(Tensor x, Tensor y) override;
  absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) override;
  absl::Status QkvRope(const QkvRopeArgs& args) override;
  absl::Status Attention(const AttentionArgs& args) override;
  absl::Status SiluMul(Tensor gate_up, Tensor out) override;
  absl::Status LinearSiluMul(Tensor x, const LinearWeight& w, Tensor gate_up, Tensor out) override;
  absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) override;
  bool TakesFp8Input(const LinearWeight& w, int64_t rows) const override;
  absl::Status AddRmsNormFp8(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                             const LinearWeight& consumer, Fp8Input quantized) override;
  absl::Status SiluMulFp8(Tensor gate_up, Tensor out, const LinearWeight& consumer, Fp8Input quantized) override;
  absl::Status LinearFp8Input(Tensor x, Fp8Input quantized, const LinearWeight& w, Tensor out) override;
  bool FusesRmsNormInto(const LinearWeight& w, int64_t rows) const override;
  bool AddsIntoResidual(const LinearWeight& w, int64_t rows) const override;
  absl::Status RmsNormLinear(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                             Tensor out, Tensor act) override;
  absl::Status LinearAddInto(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta) override;
  bool FusesQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const override;
  bool FusesFp8InputQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const override;
  absl::Status LinearFp8InputQkvRope(Tensor x, Fp8Input quantized, const LinearWeight& w,
                                     const QkvRopeArgs& rope) override;
  bool FusesLinearAddRmsNorm(const LinearWeight& w, int64_t rows) const override;
  absl::Status LinearAddRmsNorm(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta,
                                Tensor norm_weight, float eps, Tensor out, const LinearWeight& consumer,
                                const Fp8Input* out_quantized) override;
  absl::Status LinearQkvRope(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                             const QkvRopeArgs& rope) override;
  absl::Status EnqueueSample(const SampleArgs& args) override;
  absl::Status ReadSampleResults(int slot, absl::Span<SampleResult> results) override;
  absl::Status ResolvePendingTokens(Tensor ids, Tensor sampled) override;
  absl::StatusOr<std::unique_ptr<StepFence>> CreateFence() override;
  absl::StatusOr<Buffer> AllocateStaging(size_t bytes) override;

  absl::Status FillUniform(Tensor dst, uint64_t seed, float low, float high) override;
  absl::Status PrepareSampler(int32_t max_rows, int64_t vocab) override;
  // The activation dtype, and (bf16/fp16 activations) FP8 E4M3 with scales per tensor, per
  // channel, per 128 x 128 block or per row and 128 columns.
  bool SupportsLinearFormat(const StorageFormat& format) const override;
  // The activation dtype, and FP8 E4M3 with bf16/fp16 activations.
  bool SupportsKvCacheDType(DType dtype) const override;
  bool SupportsGraphs() const override { return true; }
  void SetTuningPass(bool on) override;
  absl::Status BeginCapture() override;
  absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() override;

  // --- CUDA-specific ---
  CUstream_st* stream() const;
  void* native_stream() const override { return stream(); }
  const CudaBackendOptions& options() const;
  CudaBackendOptions& mutable_options();  // e.g. to compare GEMV and cuBLASLt in a benchmark
  std::string device_name() const;
  int num_sms() const;
  // The arena's size, bytes in use, largest free block and high-water mark.
  DeviceArenaStats memory_stats() const;
  // Fills the tensor's bytes with a repeated 32-bit pattern (tests poison outputs with NaNs).
  absl::Status FillPattern(Tensor dst, uint32_t pattern);
  // Per-op timing with CUDA events. Ops issued while capturing a graph are timed by event nodes
  // in the graph, i.e. at each replay. Collect synchronizes and returns the ops recorded since
  // Start, in issue order (eager ones as run, captured ones as last replayed).
  void StartOpTiming();
  absl::StatusOr<std::vector<OpTiming>> CollectOpTimings();

 private:
  // What the linear-kernel room (linear_kernels.h) needs of this backend at a call.
  LinearContext linear_context() const;
  // Linear's checks and kernel; `quantized`: x also as the fused ops wrote it (LinearFp8Input).
  absl::Status RunLinear(Tensor x, const LinearWeight& w, Tensor out, const Fp8Input* quantized);
  // Linear's checks of its operands, and the call they make.
  absl::StatusOr<LinearCall> CheckLinear(Tensor x, const LinearWeight& w, Tensor out, const Fp8Input* quantized);
  // Whether the kernel the rules pick for `rows` rows of `w` fuses a norm and/or a residual add
  // (and, with `rope`, ends in it).
  bool LinearFuses(const LinearWeight& w, int64_t rows, bool norm, bool add,
                   const cuda::QkvRopeParams* rope = nullptr) const;
  // A call of `rows` rows through `w` without operands, for the fusion hints' rules (which read
  // only shapes and formats).
  LinearCall PlannedLinear(const LinearWeight& w, int64_t rows) const;
  // QkvRope's checks of its arguments, and the kernel parameters they give.
  absl::StatusOr<cuda::QkvRopeParams> QkvRopeParamsOf(const QkvRopeArgs& a) const;
  // AddRmsNorm, and with `quantized` also out quantized for `consumer` (AddRmsNormFp8).
  absl::Status RunAddRmsNorm(const char* op, Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                             const LinearWeight* consumer, const Fp8Input* quantized);
  // The row output a fused op writes for `consumer`, checked against out and the consumer's
  // declared input quantization (whether its kernel reads it is LinearFp8Input's check).
  absl::StatusOr<cuda::Fp8RowOutput> Fp8RowOutputFor(const char* op, Tensor out, const LinearWeight& consumer,
                                                     const Fp8Input& quantized) const;
  struct Impl;
  class OpScope;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace llm
