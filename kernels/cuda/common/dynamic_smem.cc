#include "kernels/cuda/common/dynamic_smem.h"

#include <map>
#include <mutex>
#include <utility>

namespace llm::cuda {

cudaError_t AllowDynamicSmem(const void* kernel, size_t bytes) {
  // Without the opt-in a block may use 48 KiB of shared memory, dynamic and static together. The
  // kernels here keep their static shared memory under 1 KiB: requests up to 47 KiB skip the
  // lookup below, which weighs each kernel's own static part.
  constexpr size_t kDefaultLimit = 48 * 1024;
  if (bytes <= kDefaultLimit - 1024) return cudaSuccess;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device) -> bytes set
  const std::pair<const void*, int> key{kernel, device};
  std::lock_guard<std::mutex> lock(mu);
  auto it = allowed.find(key);
  if (it != allowed.end() && it->second >= bytes) return cudaSuccess;
  cudaFuncAttributes attributes{};
  err = cudaFuncGetAttributes(&attributes, kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  if (bytes + attributes.sharedSizeBytes <= kDefaultLimit) {
    allowed[key] = bytes;
    return cudaSuccess;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) {
    cudaGetLastError();  // reported here; not left for the next launch check
    return err;
  }
  allowed[key] = bytes;
  return cudaSuccess;
}

}  // namespace llm::cuda
