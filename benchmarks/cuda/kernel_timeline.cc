#include "benchmarks/cuda/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

#if LLM_HAVE_CUPTI
#include <cupti.h>
#endif

namespace llm::bench {
namespace {

#if LLM_HAVE_CUPTI
constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kBufferAlign = 8;

std::mutex g_mutex;
std::vector<KernelRecord> g_records;
bool g_open = false;

absl::Status CuptiStatus(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return absl::InternalError(absl::StrCat("CUPTI ", what, ": ", text ? text : "unknown error"));
}

// "void llm::cuda::(anonymous namespace)::Foo<__nv_bfloat16, 32>(CUtensorMap_st, int)" -> "Foo<__nv_bfloat16, 32>".
std::string ShortName(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  if (!s.empty() && s.back() == ')') {  // drop the parameter list: its '(' matches the last ')'
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
      if (depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  return absl::StrReplaceAll(s, {{"(anonymous namespace)::", ""}, {"llm::cuda::", ""}, {"llm::", ""}});
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    g_records.push_back({ShortName(k->name), k->start, k->end, k->gridX, k->gridY, k->gridZ});
  }
  std::free(buffer);
}

#endif  // LLM_HAVE_CUPTI

}  // namespace

#if !LLM_HAVE_CUPTI
absl::Status StartKernelTimeline() {
  return absl::UnimplementedError("built without CUPTI (the CUDA toolkit's CUDA::cupti was not found): no timeline");
}
absl::StatusOr<std::vector<KernelRecord>> StopKernelTimeline() {
  return absl::UnimplementedError("built without CUPTI: no timeline");
}
#else
absl::Status StartKernelTimeline() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_open) return absl::FailedPreconditionError("a kernel timeline is already recording");
    g_records.clear();
    g_open = true;
  }
  absl::Status s = CuptiStatus(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register");
  if (s.ok()) s = CuptiStatus(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable");
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_open = false;
  }
  return s;
}

absl::StatusOr<std::vector<KernelRecord>> StopKernelTimeline() {
  absl::Status s = CuptiStatus(cuptiActivityFlushAll(1), "flush");
  const absl::Status d = CuptiStatus(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable");
  if (s.ok()) s = d;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_open = false;
  if (!s.ok()) return s;
  std::vector<KernelRecord> out = std::move(g_records);
  g_records.clear();
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}
#endif  // LLM_HAVE_CUPTI

std::string KernelTimelineTable(const std::vector<KernelRecord>& records, int steps, const std::string& anchor) {
  if (steps < 1 || records.empty() || records.size() % steps != 0)
    return absl::StrFormat("(%d kernels do not split into %d equal steps: no table)\n", records.size(), steps);
  const size_t n = records.size() / steps;
  // The layer period: the distance between the first two calls of the anchor kernel.
  std::vector<size_t> anchors;
  for (size_t i = 0; i < n && anchors.size() < 2; ++i)
    if (records[i].name.find(anchor) != std::string::npos) anchors.push_back(i);
  const size_t period = anchors.size() == 2 ? anchors[1] - anchors[0] : n;
  const size_t origin = anchors.empty() ? 0 : anchors[0] % period;

  struct Row {
    size_t first = 0;  // index of the first call in the first step
    std::string name;
    int grid = 0;
    int calls = 0;
    double charged_ns = 0, full_ns = 0;
  };
  using Key = std::tuple<size_t, std::string, int>;  // place in the layer, name, blocks
  std::map<Key, Row> rows;
  double total_charged = 0;
  std::vector<double> spans;
  for (int s = 0; s < steps; ++s) {
    const KernelRecord* step = records.data() + s * n;
    uint64_t last_end = step[0].start_ns, span_end = 0;
    for (size_t i = 0; i < n; ++i) {
      const KernelRecord& k = step[i];
      const uint64_t from = std::max(k.start_ns, last_end);
      const double charged = k.end_ns > from ? static_cast<double>(k.end_ns - from) : 0.0;
      last_end = std::max(last_end, k.end_ns);
      span_end = std::max(span_end, k.end_ns);
      const int blocks = k.grid_x * k.grid_y * k.grid_z;
      Row& r = rows[Key{(i + period - origin) % period, k.name, blocks}];
      if (r.calls == 0) r = Row{i, k.name, blocks, 0, 0, 0};
      ++r.calls;
      r.charged_ns += charged;
      r.full_ns += static_cast<double>(k.end_ns - k.start_ns);
      total_charged += charged;
    }
    spans.push_back(static_cast<double>(span_end - step[0].start_ns));
  }
  std::vector<Row> sorted;
  for (auto& [key, r] : rows) sorted.push_back(r);
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.first < b.first; });
  std::sort(spans.begin(), spans.end());
  std::string md = "| kernel | blocks | calls a step | charged us a call | start-to-end us a call | % of step |\n"
                   "| --- | --- | --- | --- | --- | --- |\n";
  for (const Row& r : sorted) {
    const double calls = static_cast<double>(r.calls);
    md += absl::StrFormat("| %s | %d | %g | %.2f | %.2f | %.1f |\n", absl::StrReplaceAll(r.name, {{"|", "\\|"}}),
                          r.grid, calls / steps, r.charged_ns / calls / 1e3, r.full_ns / calls / 1e3,
                          100.0 * r.charged_ns / total_charged);
  }
  md += absl::StrFormat(
      "\n%d kernels a step; first kernel's start to last kernel's end: median %.3f ms over %d steps; charged "
      "time (the span less idle gaps): %.3f ms a step.\n",
      n, spans[spans.size() / 2] / 1e6, steps, total_charged / steps / 1e6);
  return md;
}

}  // namespace llm::bench
