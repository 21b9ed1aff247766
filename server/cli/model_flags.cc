#include "server/cli/model_flags.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_factory.h"
#include "kernels/core/dtype.h"
#include "kernels/core/status.h"
#include "parallel/nccl_communicator.h"

namespace llm::cli {

void ModelFlags::Register(FlagSet& f) {
  f.String("model", &model, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)");
  f.String("device", &device, "auto, cpu or cuda (auto: cuda when this build has it and a GPU is usable)");
  f.String("dtype", &dtype, "auto, bf16, fp16 or fp32 (the CPU backend computes in fp32)");
  f.Int("threads", &threads, "CPU backend threads (0: all cores)");
  f.Int("max-context", &max_context, "longest prompt + output in tokens (0: the model's)");
  f.Int("max-seqs", &max_seqs,
        "sequences batched per step (0: 512 on a GPU, fewer when the KV cache cannot give each 256 tokens; 64 on the "
        "CPU)");
  f.Int("max-tokens-per-step", &max_tokens_per_step, "token budget per step, the prefill chunk size (0: 1024 on a GPU, at least twice --max-seqs; 2048 on the CPU)");
  f.Int("kv-cache-blocks", &kv_cache_blocks, "KV cache blocks (0: from --kv-cache-fraction)");
  f.Float("kv-cache-fraction", &kv_cache_fraction,
          "KV cache's share of the memory left after weights and activations (CUDA: of the arena)");
  f.Float("gpu-memory-fraction", &gpu_memory_fraction,
          "CUDA: share of the GPU's memory reserved at start-up for the model and KV cache, in (0, 1]");
  f.Int("block-size", &block_size, "tokens per KV cache block");
  f.Int("tp", &tp, "tensor-parallel ranks (launch TP*PP ranks with mpirun)");
  f.Int("pp", &pp, "pipeline stages");
  f.String("layers-per-stage", &layers_per_stage, "comma-separated layer counts per stage (default: balanced, the last stage's LM head counted as layers)");
  f.Bool("dummy-weights", &dummy_weights,
         "random weights in the shapes of --model's config.json (benchmarks; FP8 ones with --quantization fp8)");
  f.String("quantization", &quantization,
           "none or fp8: quantize a bf16/fp16/fp32 checkpoint's linears to FP8 at load (per-channel weights, "
           "dynamic per-token activations); FP8 checkpoints load as published either way");
  f.String("kv-cache-dtype", &kv_cache_dtype,
           "auto, bf16, fp16, fp32 or fp8 (auto: fp8 when the checkpoint carries k/v scales and the engine "
           "computes in 16 bits, else the activation dtype)");
  f.Bool("emulate-fp8", &emulate_fp8,
         "CPU: quantize FP8 linears' inputs to FP8 as the weights declare (emulates the GPU's W8A8 path)");
  f.Bool("no-overlap", &no_overlap,
         "plan and launch each step only after the previous one's tokens are back (for comparisons; by default "
         "the next step is launched while the device runs the current one)");
  f.Int("output-threads", &output_threads, "threads that detokenize and deliver outputs");
  f.Bool("enable-prefix-caching", &enable_prefix_caching,
         "share the KV blocks of prompt prefixes between requests (the default)");
  f.Bool("no-enable-prefix-caching", &no_enable_prefix_caching, "compute every prompt in full");
  f.Int("comm-timeout-s", &comm_timeout_s,
        "seconds a collective or transfer between ranks may take: past it the step fails on every rank and the "
        "group ends (a stalled rank)");
  f.Bool("fixed-kernels", &fixed_kernels,
         "CUDA: pick decode linear kernels by a fixed rule instead of timing them at start-up, so that bf16 "
         "outputs are the same across restarts and layouts (may be a few percent slower)");
}

std::string ModelFlags::Device() const {
  if (device != "auto") return device;
  return CudaBackendBuilt() && CudaDeviceCount() > 0 ? "cuda" : "cpu";
}

absl::Status ModelFlags::Validate() const {
  if (device != "auto" && !ParseDeviceKind(device).ok())
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cpu or cuda, got '", device, "'"));
  if (output_threads < 1 || output_threads > 64)
    return absl::InvalidArgumentError(absl::StrCat("--output-threads must be in [1, 64], got ", output_threads));
  if (!(gpu_memory_fraction > 0.0 && gpu_memory_fraction <= 1.0))
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-memory-fraction must be in (0, 1], got ", gpu_memory_fraction));
  if (comm_timeout_s < 1) return absl::InvalidArgumentError("--comm-timeout-s must be at least 1");
  if (tp < 1 || pp < 1 || tp > 4096 || pp > 4096) return absl::InvalidArgumentError("--tp and --pp must be positive");
  if (dtype != "auto") {
    const absl::StatusOr<DType> parsed = ParseDType(dtype);
    if (!parsed.ok())
      return absl::InvalidArgumentError(absl::StrCat("--dtype must be auto, bf16, fp16 or fp32, got '", dtype, "'"));
    if (*parsed != DType::kF32 && Device() == "cpu")
      return absl::InvalidArgumentError(absl::StrCat("--dtype ", dtype, ": the CPU backend computes in float32 only (",
                                                     device == "auto" ? "no GPU here; " : "",
                                                     "--dtype fp32 or auto, or --device cuda)"));
  }
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi, const char* note) -> absl::Status {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be in [", lo, ", ", hi, "]", note, ", got ", v));
  };
  RETURN_IF_ERROR(in_range("threads", threads, 0, 4096, " (0: all cores)"));
  RETURN_IF_ERROR(in_range("max-seqs", max_seqs, 0, 65536, " (0: from the device and the KV cache)"));
  RETURN_IF_ERROR(in_range("max-tokens-per-step", max_tokens_per_step, 0, int64_t{1} << 20, " (0: the default)"));
  RETURN_IF_ERROR(in_range("kv-cache-blocks", kv_cache_blocks, 0, int64_t{1} << 30, " (0: from --kv-cache-fraction)"));
  RETURN_IF_ERROR(in_range("block-size", block_size, 1, 4096, ""));
  if (!(kv_cache_fraction > 0.0 && kv_cache_fraction <= 1.0))
    return absl::InvalidArgumentError(absl::StrCat("--kv-cache-fraction must be in (0, 1], got ", kv_cache_fraction));
  if (max_context < 0 || max_context > kMaxContextLength)
    return absl::InvalidArgumentError(
        absl::StrCat("--max-context must be in [0, ", kMaxContextLength, "] (0: the model's), got ", max_context));
  if (absl::Status s = ParseOnlineQuantization(quantization).status(); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("--quantization: ", s.message()));
  if (absl::Status s = ParseKvCacheDType(kv_cache_dtype).status(); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype: ", s.message()));
  return absl::OkStatus();
}

bool ModelFlags::Distributed() const { return tp * pp > 1 || MpiRuntime::LaunchedByMpiLauncher(); }

absl::StatusOr<ParallelOptions> ModelFlags::ToParallelOptions() const {
  ParallelOptions p;
  if (tp < 1 || pp < 1 || tp > 4096 || pp > 4096)
    return absl::InvalidArgumentError("--tp and --pp must be positive");
  p.tp = static_cast<int>(tp);
  p.pp = static_cast<int>(pp);
  if (comm_timeout_s < 1) return absl::InvalidArgumentError("--comm-timeout-s must be at least 1");
  p.comm_timeout = absl::Seconds(comm_timeout_s);
  ASSIGN_OR_RETURN(p.layers_per_stage, ParseLayersPerStage(layers_per_stage));
  return p;
}

absl::StatusOr<std::unique_ptr<Deployment>> Deploy(const ModelFlags& flags, int* argc, char*** argv) {
  ASSIGN_OR_RETURN(ParallelOptions parallel, flags.ToParallelOptions());
  return Deployment::Create(flags.ToBuildOptions(), parallel, argc, argv);
}

std::string ModelFlags::ModelDir() const {
  if (!model.empty()) return model;
#ifdef LLM_DEFAULT_MODEL_DIR
  return LLM_DEFAULT_MODEL_DIR;
#else
  return "";
#endif
}

std::vector<std::string> ModelFlags::ToArgs() const {
  std::vector<std::string> args = {"--model", std::filesystem::absolute(ModelDir()).lexically_normal().string()};
  auto add = [&args](const char* name, const auto& value) {
    args.push_back(absl::StrCat("--", name));
    args.push_back(absl::StrCat(value));
  };
  add("device", device);
  add("dtype", dtype);
  add("threads", threads);
  add("max-context", max_context);
  add("max-seqs", max_seqs);
  add("max-tokens-per-step", max_tokens_per_step);
  add("kv-cache-blocks", kv_cache_blocks);
  add("kv-cache-fraction", kv_cache_fraction);
  add("gpu-memory-fraction", gpu_memory_fraction);
  add("block-size", block_size);
  add("tp", tp);
  add("pp", pp);
  if (!layers_per_stage.empty()) add("layers-per-stage", layers_per_stage);
  add("quantization", quantization);
  add("kv-cache-dtype", kv_cache_dtype);
  add("comm-timeout-s", comm_timeout_s);
  for (const auto& [name, on] : {std::pair{"dummy-weights", dummy_weights}, std::pair{"fixed-kernels", fixed_kernels},
                                 std::pair{"no-overlap", no_overlap}, std::pair{"emulate-fp8", emulate_fp8},
                                 std::pair{"no-enable-prefix-caching", no_enable_prefix_caching}})
    if (on) args.push_back(absl::StrCat("--", name));
  return args;
}

EngineBuildOptions ModelFlags::ToBuildOptions() const {
  EngineBuildOptions o;
  o.model_dir = ModelDir();
  o.device = Device();
  o.dtype = dtype;
  o.num_threads = static_cast<int>(threads);
  o.max_context = max_context;
  o.max_seqs = static_cast<int32_t>(max_seqs);
  o.max_tokens_per_step = static_cast<int32_t>(max_tokens_per_step);
  o.num_kv_blocks = kv_cache_blocks;
  o.kv_cache_fraction = kv_cache_fraction;
  o.gpu_memory_fraction = gpu_memory_fraction;
  o.block_size = static_cast<int32_t>(block_size);
  o.dummy_weights = dummy_weights;
  o.quantization = quantization;
  o.kv_cache_dtype = kv_cache_dtype;
  o.emulate_fp8_activations = emulate_fp8;
  o.time_linear_kernels = !fixed_kernels;
  o.overlap_steps = !no_overlap;
  o.prefix_caching = !no_enable_prefix_caching;
  o.output_threads = static_cast<int32_t>(output_threads);
  o.max_queue = static_cast<int32_t>(std::clamp<int64_t>(max_queue, 0, INT32_MAX));
  return o;
}

}  // namespace llm::cli
