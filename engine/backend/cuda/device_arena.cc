#include "engine/backend/cuda/device_arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/common/cuda_status.h"

namespace llm {

std::string FormatBytes(size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (size_t{1} << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  if (bytes >= (size_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrCat(bytes, " B");
}

std::string DeviceArenaStats::ToString() const {
  return absl::StrCat(FormatBytes(reserved), " arena (",
                      absl::StrFormat("%.1f%%", device_total ? 100.0 * reserved / device_total : 0.0), " of ",
                      FormatBytes(device_total), "): ", FormatBytes(in_use), " in use (peak ",
                      FormatBytes(peak_in_use), ") in ", buffers, " buffers, largest free block ",
                      FormatBytes(largest_free));
}

namespace {

std::string DeviceLabel(const DeviceArenaOptions& o) {
  return o.device_name.empty() ? absl::StrCat("cuda:", o.device_index)
                               : absl::StrCat("cuda:", o.device_index, " (", o.device_name, ")");
}

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceArena>> DeviceArena::Create(const DeviceArenaOptions& o) {
  if (!(o.memory_fraction > 0.0 && o.memory_fraction <= 1.0))  // also rejects NaN
    return absl::InvalidArgumentError(absl::StrCat(
        "the GPU memory fraction (--gpu-memory-fraction) must be in (0, 1], got ", o.memory_fraction));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device_index));
  size_t free_b = 0, total_b = 0;
  CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  // A fraction of the total, as vLLM's gpu_memory_utilization, so that the same flag gives the same
  // arena on every rank; but never more than is free now (another process, or another backend in
  // this one, may hold some), less the headroom that what lives outside the arena needs.
  const size_t wanted = static_cast<size_t>(o.memory_fraction * static_cast<double>(total_b));
  const size_t available = free_b > o.headroom_bytes ? free_b - o.headroom_bytes : 0;
  const size_t align = RangeAllocator::kDefaultAlignment;
  const size_t bytes = std::min(wanted, available) / align * align;
  if (bytes == 0)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve device memory on ", DeviceLabel(o), ": ", FormatBytes(free_b), " free of ",
        FormatBytes(total_b), ", of which ", FormatBytes(o.headroom_bytes),
        " must stay free for the CUDA context, cuBLASLt and NCCL (is another process using this GPU?)"));
  void* base = nullptr;
  const cudaError_t err = cudaMalloc(&base, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the (non-sticky) error, so later calls do not report it again
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot reserve the device memory arena of ", FormatBytes(bytes), " (--gpu-memory-fraction ",
        o.memory_fraction, " of ", FormatBytes(total_b), ") on ", DeviceLabel(o), ": out of memory with ",
        FormatBytes(free_b),
        " free a moment before (is another process using this GPU?); lower --gpu-memory-fraction"));
  }
  CUDA_RETURN_IF_ERROR(err);
  return std::shared_ptr<DeviceArena>(new DeviceArena(o, base, bytes, total_b));
}

DeviceArena::DeviceArena(const DeviceArenaOptions& options, void* base, size_t bytes, size_t device_total)
    : options_(options), base_(base), device_total_(device_total), ranges_(bytes) {}

DeviceArena::~DeviceArena() {
  // A destructor has no one to report to: errors (e.g. the runtime already unloading at exit) are
  // dropped. The pointer is freed with its own device current, whichever thread runs this.
  int current = -1;
  const bool switch_device = cudaGetDevice(&current) == cudaSuccess && current != options_.device_index;
  if (switch_device) cudaSetDevice(options_.device_index);
  cudaFree(base_);
  if (switch_device) cudaSetDevice(current);
}

absl::StatusOr<Buffer> DeviceArena::Allocate(size_t bytes, std::string_view what) {
  if (bytes == 0) return Buffer(nullptr, 0, device(), nullptr);
  absl::StatusOr<size_t> offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    offset = ranges_.Allocate(bytes);
  }
  if (!offset.ok()) {
    const DeviceArenaStats s = stats();
    return absl::ResourceExhaustedError(absl::StrCat(
        "out of GPU memory: cannot allocate ", FormatBytes(bytes), what.empty() ? "" : " for ",
        std::string(what), " on ", DeviceLabel(options_), " from its ", s.ToString(),
        " (--gpu-memory-fraction ", options_.memory_fraction, "). The model and its KV cache do not fit: ",
        "raise --gpu-memory-fraction, spread the model over more GPUs (--tp, --pp), ",
        "or lower --kv-cache-fraction, --max-seqs or --max-tokens-per-step"));
  }
  // The deleter holds the arena: buffers may outlive the backend that carved them.
  return Buffer(static_cast<char*>(base_) + *offset, bytes, device(),
                [arena = shared_from_this(), at = *offset](void*) { arena->Free(at); });
}

void DeviceArena::Free(size_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  ranges_.Free(offset);
}

DeviceArenaStats DeviceArena::stats() const {
  RangeAllocatorStats r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = ranges_.stats();
  }
  DeviceArenaStats s;
  s.device_total = device_total_;
  s.reserved = r.capacity;
  s.in_use = r.in_use;
  s.largest_free = r.largest_free;
  s.peak_in_use = r.peak_in_use;
  s.buffers = r.allocations;
  return s;
}

size_t DeviceArena::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranges_.stats().largest_free;
}

}  // namespace llm
