// DeviceArena: all of a backend's device memory, as one cudaMalloc made when the backend is
// created. Weights, activations, workspaces, the KV cache and the step metadata are carved out of
// it (first fit, 256-byte aligned, freed neighbours merged: RangeAllocator), so that
//  - what the engine may use is decided once, up front, as a fraction of the device (vLLM's
//    gpu_memory_utilization), and not by whatever cudaMemGetInfo says later;
//  - a model that does not fit fails at start-up with one message that says by how much and what
//    to change, instead of an anonymous cudaErrorMemoryAllocation somewhere in loading;
//  - nothing calls cudaMalloc/cudaFree (which synchronize the device) once serving starts.
// What stays outside: the CUDA context, cuBLASLt's and NCCL's own buffers, graph executables and
// start-up staging; they live in the part of the device the arena leaves (1 - fraction of it, and
// at least `headroom_bytes`).
//
// Freed ranges are reused at once, without synchronizing. Like any stream-ordered caching
// allocator, that is safe for work on the backend's one stream (a later user of the range is
// queued after the earlier one); memory used on another stream must be synchronized before its
// Buffer is destroyed.
//
// A plain C++ header: CUDA's headers stay in device_arena.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/range_allocator.h"
#include "engine/core/tensor.h"

namespace llm {

struct DeviceArenaOptions {
  int device_index = 0;
  std::string device_name;  // for messages, e.g. "NVIDIA H100 80GB HBM3"
  // The arena's size as a fraction of the device's total memory, in (0, 1]; see
  // CudaBackendOptions::memory_fraction.
  double memory_fraction = 0.9;
  // Left free whatever the fraction: the CUDA context's growth, cuBLASLt, NCCL and graph memory.
  size_t headroom_bytes = size_t{256} << 20;
};

struct DeviceArenaStats {
  size_t device_total = 0;  // the device's memory
  size_t reserved = 0;      // the arena's one allocation
  size_t in_use = 0;        // carved out now (each buffer rounded up to 256 bytes)
  size_t largest_free = 0;  // the largest buffer that can still be carved
  size_t peak_in_use = 0;   // high-water mark of in_use
  int64_t buffers = 0;      // buffers carved and not yet freed
  // e.g. "71.30 GiB arena (90.0% of 79.19 GiB): 15.02 GiB in use (peak 15.20 GiB) in 312 buffers,
  // largest free block 56.28 GiB"
  std::string ToString() const;
};

// Bytes as "512 B", "1.5 KiB", "32.0 MiB", "71.30 GiB".
std::string FormatBytes(size_t bytes);

class DeviceArena : public std::enable_shared_from_this<DeviceArena> {
 public:
  // Reserves min(memory_fraction x the device's total memory, what is free now - headroom) on
  // `device_index` (which becomes the calling thread's current device). InvalidArgument for a
  // fraction outside (0, 1]; ResourceExhausted, naming the device and what is free, when that
  // leaves nothing or the allocation itself fails.
  static absl::StatusOr<std::shared_ptr<DeviceArena>> Create(const DeviceArenaOptions& options);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A buffer of `bytes` carved from the arena (an empty Buffer for 0 bytes); its deleter gives the
  // range back and keeps the arena alive until then. `what` names the buffer in the error
  // ("the cuBLASLt workspace"); empty for an anonymous request. ResourceExhausted when no free
  // range is large enough, with the arena's sizes, the device and the flags that make room.
  absl::StatusOr<Buffer> Allocate(size_t bytes, std::string_view what = {});

  DeviceArenaStats stats() const;
  // The largest buffer Allocate can give now (what Backend::FreeMemory reports).
  size_t largest_free() const;
  Device device() const { return Device{DeviceKind::kCuda, options_.device_index}; }
  const DeviceArenaOptions& options() const { return options_; }

 private:
  DeviceArena(const DeviceArenaOptions& options, void* base, size_t bytes, size_t device_total);
  void Free(size_t offset);

  const DeviceArenaOptions options_;
  void* const base_;
  const size_t device_total_;
  mutable std::mutex mu_;
  RangeAllocator ranges_;  // guarded by mu_
};

}  // namespace llm
