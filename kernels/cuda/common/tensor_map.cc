#include "kernels/cuda/common/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "absl/strings/str_cat.h"

namespace llm::cuda {
namespace {

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

EncodeTiled TensorMapEncoder() {
  static const EncodeTiled encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encoder;
}

}  // namespace

bool TensorMapsAvailable() { return TensorMapEncoder() != nullptr; }

absl::Status EncodeSwizzledRows(CUtensorMap* map, const void* data, int64_t rows, int64_t row_bytes, int box_rows,
                                const char* what) {
  const EncodeTiled encode = TensorMapEncoder();
  if (encode == nullptr) return absl::UnavailableError(absl::StrCat(what, ": the driver has no cuTensorMapEncodeTiled"));
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {kTensorMapBoxBytes, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(data), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return absl::InternalError(
        absl::StrCat(what, ": cuTensorMapEncodeTiled error ", static_cast<int>(r), " for ", rows, " x ", row_bytes));
  return absl::OkStatus();
}

}  // namespace llm::cuda
