// Hostile or broken templates stop with an error within the sandbox's limits: unbounded
// recursion, huge loops, huge strings, deep nesting; and they stop fast.
#include <chrono>
#include <string>

#include "engine/chat/template.h"
#include "engine/chat/template_error.h"
#include "gtest/gtest.h"

namespace llm::chat {
namespace {

struct Hostile {
  const char* name;
  std::string source;
  ErrorKind kind;
};

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

class HostileTemplateTest : public ::testing::TestWithParam<Hostile> {};

TEST_P(HostileTemplateTest, StopsWithAnError) {
  const Hostile& h = GetParam();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const Template>> parsed = Template::Parse(h.source);
  absl::Status status = parsed.status();
  if (parsed.ok()) {
    RenderLimits limits;
    limits.max_output_bytes = 1 << 20;
    limits.max_iterations = 1'000'000;
    status = (*parsed)->Render({}, limits).status();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(status.ok());
  ASSERT_TRUE(ErrorKindOf(status).has_value()) << status;
  EXPECT_EQ(*ErrorKindOf(status), h.kind) << status;
  EXPECT_LT(seconds, 5.0);
}

INSTANTIATE_TEST_SUITE_P(
    Limits, HostileTemplateTest,
    ::testing::Values(
        Hostile{"infinite_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ErrorKind::kLimit},
        Hostile{"mutual_recursion",
                "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
                ErrorKind::kLimit},
        Hostile{"recursive_loop",
                "{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}", ErrorKind::kLimit},
        Hostile{"nested_huge_loops",
                "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x"
                "{% endfor %}{% endfor %}{% endfor %}",
                ErrorKind::kLimit},
        Hostile{"range_over_sandbox_max", "{% for i in range(10**9) %}{% endfor %}", ErrorKind::kOverflow},
        Hostile{"huge_output", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", ErrorKind::kLimit},
        Hostile{"huge_string", "{{ 'x' * 10**12 }}", ErrorKind::kLimit},
        Hostile{"doubling_string",
                "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                ErrorKind::kLimit},
        Hostile{"huge_list", "{{ ([1] * 10**12)|length }}", ErrorKind::kLimit},
        Hostile{"deep_parentheses", "{{ " + Repeat("(", 5000) + "1" + Repeat(")", 5000) + " }}", ErrorKind::kSyntax},
        Hostile{"deep_if_nesting", Repeat("{% if true %}", 3000) + "x" + Repeat("{% endif %}", 3000),
                ErrorKind::kSyntax},
        Hostile{"deep_not_chain", "{{ " + Repeat("not ", 20000) + "true }}", ErrorKind::kSyntax},
        Hostile{"deep_filter_chain", "{{ 'a'" + Repeat("|upper", 100000) + " }}", ErrorKind::kSyntax},
        Hostile{"deep_operator_chain", "{{ 1" + Repeat(" + 1", 100000) + " }}", ErrorKind::kSyntax},
        Hostile{"deep_attribute_chain", "{{ x" + Repeat(".y", 100000) + " }}", ErrorKind::kSyntax},
        Hostile{"unsafe_attribute", "{{ ''.__class__.__mro__[1].__subclasses__() }}", ErrorKind::kSecurity},
        Hostile{"list_mutation", "{% set xs = [] %}{{ xs.append(1) }}", ErrorKind::kSecurity}),
    [](const ::testing::TestParamInfo<Hostile>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace llm::chat
