#include "engine/model/int4_repack.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "engine/core/int4_layout.h"

namespace llm {
namespace {

int64_t RoundUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

}  // namespace

absl::StatusOr<Int4Plan> PlanInt4Linear(const std::string& label, const std::vector<Int4Part>& parts) {
  if (parts.empty()) return absl::InternalError(absl::StrCat(label, ": no parts"));
  const Int4Part& first = parts.front();
  const Int4Module& m0 = *first.module;
  Int4Plan plan;
  plan.k = first.cols;
  plan.n = parts.back().dst_row + parts.back().rows;
  // Each column's checkpoint group, which every part must agree on.
  std::vector<int64_t> group(plan.k);
  for (int64_t c = 0; c < plan.k; ++c) group[c] = m0.Group(first.src_col + c);
  bool act_order = m0.act_order();
  for (const Int4Part& p : parts) {
    const Int4Module& m = *p.module;
    if (p.src_col != first.src_col || p.cols != first.cols)
      return absl::InternalError(absl::StrCat(label, ": parts take different columns"));
    act_order = act_order || m.act_order();
    for (int64_t c = 0; c < plan.k; ++c) {
      if (m.Group(p.src_col + c) != group[c])
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": '", m0.module(), "' and '", m.module(), "' put input column ", p.src_col + c,
            " in different 4-bit groups (", group[c], " and ", m.Group(p.src_col + c),
            "); the parts of a fused projection need one g_idx"));
    }
  }
  if (!act_order) {
    // A slice of K must keep whole groups: a group cut in two would need its scale on both ranks,
    // and the producers' kernels refuse such splits too.
    const int64_t g = m0.group_size(), begin = first.src_col, end = first.src_col + first.cols;
    if (begin % g != 0 || (end % g != 0 && end != m0.k()))
      return absl::InvalidArgumentError(absl::StrCat(
          label, " ('", m0.module(), "'): this tensor-parallel rank takes input columns [", begin, ", ", end, ") of ",
          m0.k(), ", which cut its 4-bit groups of ", g, " columns; choose a tensor-parallel size that splits its ",
          m0.k(), " columns into multiples of ", g));
  }
  // Storage order: columns sorted by group (stable: column order within a group), each group
  // padded to whole chunks.
  std::vector<int64_t> order(plan.k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return group[a] < group[b]; });
  std::vector<int32_t> perm;
  for (size_t i = 0; i < order.size();) {
    const int64_t g = group[order[i]];
    const int64_t local = static_cast<int64_t>(plan.source_group.size());
    plan.source_group.push_back(g);
    const size_t start = perm.size();
    for (; i < order.size() && group[order[i]] == g; ++i) perm.push_back(static_cast<int32_t>(order[i]));
    perm.resize(start + RoundUp(perm.size() - start, kInt4Chunk), -1);
    for (size_t j = start; j < perm.size(); j += kInt4Chunk) plan.chunk_group.push_back(static_cast<int32_t>(local));
  }
  plan.kp = static_cast<int64_t>(perm.size());
  plan.groups = static_cast<int64_t>(plan.source_group.size());
  bool identity = plan.kp == plan.k;
  for (int64_t j = 0; identity && j < plan.kp; ++j) identity = perm[j] == j;
  if (!identity) plan.input_perm = std::move(perm);
  // Zero points: only when some zero differs from the symmetric 8 (GPTQ stores 8s for sym).
  for (const Int4Part& p : parts)
    for (int64_t r = 0; r < p.rows && !plan.zero_points; ++r)
      for (int64_t g : plan.source_group)
        if (p.module->Zero(p.src_row + r, g) != kInt4SymmetricZero) {
          plan.zero_points = true;
          break;
        }
  return plan;
}

Int4Plan ColumnOrderInt4Plan(int64_t n, int64_t k, int64_t group_size, bool zero_points) {
  Int4Plan plan;
  plan.n = n;
  plan.k = plan.kp = k;
  plan.groups = k / group_size;
  plan.zero_points = zero_points;
  for (int64_t c = 0; c < k / kInt4Chunk; ++c)
    plan.chunk_group.push_back(static_cast<int32_t>(c * kInt4Chunk / group_size));
  for (int64_t g = 0; g < plan.groups; ++g) plan.source_group.push_back(g);
  return plan;
}

void FillInt4Codes(const Int4Plan& plan, const std::vector<Int4Part>& parts, uint8_t* codes) {
  const Int4Layout layout{plan.n, plan.kp};
  std::fill(codes, codes + plan.n * plan.kp / 2, uint8_t{0});
  std::vector<uint8_t> part_codes;
  for (const Int4Part& p : parts) {
    part_codes.resize(static_cast<size_t>(p.rows * p.cols));
    p.module->Codes(p.src_row, p.rows, p.src_col, p.cols, part_codes.data());
    for (int64_t r = 0; r < p.rows; ++r) {
      const int64_t row = p.dst_row + r;
      const uint8_t* in = part_codes.data() + r * p.cols;
      if (plan.input_perm.empty()) {
        for (int64_t j = 0; j < plan.kp; ++j) layout.Set(codes, row, j, in[j]);
      } else {
        for (int64_t j = 0; j < plan.kp; ++j)
          if (plan.input_perm[j] >= 0) layout.Set(codes, row, j, in[plan.input_perm[j]]);
      }
    }
  }
}

void FillInt4Scales(const Int4Plan& plan, const std::vector<Int4Part>& parts, DType scale_dtype, void* scales) {
  for (const Int4Part& p : parts)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t g = 0; g < plan.groups; ++g) {
        const float s = p.module->Scale(p.src_row + r, plan.source_group[g]);
        const int64_t i = (p.dst_row + r) * plan.groups + g;
        if (scale_dtype == DType::kF16)
          static_cast<uint16_t*>(scales)[i] = FloatToFp16(s);
        else
          static_cast<float*>(scales)[i] = s;
      }
}

void FillInt4Zeros(const Int4Plan& plan, const std::vector<Int4Part>& parts, uint8_t* zeros) {
  for (const Int4Part& p : parts)
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t g = 0; g < plan.groups; ++g)
        zeros[(p.dst_row + r) * plan.groups + g] =
            static_cast<uint8_t>(p.module->Zero(p.src_row + r, plan.source_group[g]));
}

}  // namespace llm
