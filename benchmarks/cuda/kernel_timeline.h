// Every kernel's start and end on the GPU while a recording is open, through CUPTI's activity API
// (concurrent-kernel records: kernels inside CUDA graphs are recorded one by one, and recording
// does not serialize them, so programmatic dependent launch keeps overlapping them). The per-op
// table of llm_cuda_bench times ops with PDL off (event nodes sit between the kernels); this shows
// what each kernel costs the step as it really runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm::bench {

struct KernelRecord {
  std::string name;  // demangled, without the parameter list
  uint64_t start_ns = 0, end_ns = 0;
  int grid_x = 0, grid_y = 0, grid_z = 0;
};

// One recording at a time in a process. Start, run the work, synchronize, Stop.
absl::Status StartKernelTimeline();
// The kernels that ran since Start, ordered by start time.
absl::StatusOr<std::vector<KernelRecord>> StopKernelTimeline();

// `records` hold `steps` runs of the same kernel sequence (graph replays of one step). Each kernel
// is charged what it adds to the step: from the later of its start and the previous kernels'
// last end, to its end (so the charges of a step add up to its span less idle gaps). Kernels are
// grouped by their place in the layer (the period between consecutive calls of `anchor`, a
// substring of the kernel that runs once a layer), name and grid, in step order: a Markdown table
// of calls a step, charged and full (start to end) microseconds a call, and share of the step.
std::string KernelTimelineTable(const std::vector<KernelRecord>& records, int steps, const std::string& anchor);

}  // namespace llm::bench
