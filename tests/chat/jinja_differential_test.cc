// Differential test of the Jinja engine against Python's jinja2, configured as transformers
// configures it (tests/chat/jinja_reference.py): the hand-written cases of
// tests/data/chat/jinja_cases.txt (every construct, filter, test and method) and random
// expression and whitespace-control cases must give identical output, or errors of the same
// class. jinja2 runs at test time; without python3 and jinja2 the test fails.
#include <unistd.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/json_value.h"
#include "engine/chat/template.h"
#include "engine/chat/template_error.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::chat {
namespace {

using Json = nlohmann::ordered_json;

struct Case {
  std::string name;
  std::string source;
  Json context = Json::object();
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Case> LoadCases(const std::string& path) {
  std::vector<Case> cases;
  std::istringstream in(ReadFile(path));
  std::string line;
  std::vector<std::string> lines;
  auto flush = [&] {
    if (cases.empty()) return;
    std::string body;
    for (size_t i = 0; i < lines.size(); ++i) body += (i ? "\n" : "") + lines[i];
    cases.back().source = body;
    lines.clear();
  };
  while (std::getline(in, line)) {
    if (line.rfind("### ", 0) == 0) {
      flush();
      Case c;
      const size_t bar = line.find(" | ");
      c.name = line.substr(4, bar == std::string::npos ? std::string::npos : bar - 4);
      if (bar != std::string::npos) c.context = Json::parse(line.substr(bar + 3));
      cases.push_back(std::move(c));
    } else if (!cases.empty()) {
      lines.push_back(line);
    }
  }
  flush();
  // The case file keeps one CRLF case honest: turn its "\n" into "\r\n".
  for (Case& c : cases) {
    if (c.name != "crlf") continue;
    std::string crlf;
    for (char ch : c.source) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
    c.source = crlf + "\r\n";
  }
  return cases;
}

// --- random cases ---

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  std::string Expression(int depth) {
    if (depth <= 0 || Chance(0.25)) return Atom();
    switch (Pick(12)) {
      case 0: case 1: {
        static const char* kOps[] = {"+", "-", "*", "/", "//", "%", "**", "~", "and", "or", "==", "!=",
                                     "<", "<=", ">", ">=", "in", "not in"};
        return "(" + Expression(depth - 1) + " " + kOps[Pick(18)] + " " + Expression(depth - 1) + ")";
      }
      case 2: return std::string(Chance(0.5) ? "not " : "-") + "(" + Expression(depth - 1) + ")";
      case 3: case 4: {
        static const char* kFilters[] = {
            "upper", "lower", "length", "string", "int", "float", "abs", "first", "last", "list", "sort",
            "unique|list", "reverse|list", "join(',')", "default('d')", "trim", "round", "round(1)", "tojson",
            "sum", "min", "max", "capitalize", "title", "count", "items|list", "dictsort", "batch(2)|list",
            "map('string')|list", "select('odd')|list", "reject('none')|list", "replace('a', 'b')",
            "tojson(indent=1)", "indent(2)", "center(6)", "wordcount", "float|round(2)", "int|abs"};
        return "(" + Expression(depth - 1) + ")|" + kFilters[Pick(38)];
      }
      case 5: {
        static const char* kTests[] = {"defined", "undefined", "none", "string", "number", "odd", "even",
                                       "sequence", "mapping", "integer", "float", "iterable", "boolean",
                                       "true", "false", "lower", "upper", "divisibleby 2", "in [1, 'a']"};
        return "(" + Expression(depth - 1) + " is " + (Chance(0.3) ? "not " : "") + kTests[Pick(19)] + ")";
      }
      case 6: return "(" + Expression(depth - 1) + " if " + Expression(depth - 1) + " else " + Expression(depth - 1) + ")";
      case 7: return "[" + Expression(depth - 1) + ", " + Expression(depth - 1) + "]";
      case 8: return "{'k': " + Expression(depth - 1) + ", " + Atom() + ": 1}";
      case 9: {
        // Subscripts apply to variables: jinja2 folds a subscript of a constant at compile time
        // with its forgiving getitem (undefined) but slices other values with Python's own
        // subscript (TypeError), an artifact no template relies on.
        static const char* kIndex[] = {"[0]", "[-1]", "[1:]", "[::-1]", "[:2]", "['k']", ".k", "[1]"};
        static const char* kVars[] = {"x", "y", "s", "l", "d", "u", "e", "t"};
        return std::string(kVars[Pick(8)]) + kIndex[Pick(8)];
      }
      case 10: {
        static const char* kMethods[] = {".upper()", ".strip()", ".split()", ".lower()", ".title()",
                                         ".startswith('a')", ".endswith('x')", ".replace('a', 'z')",
                                         ".count('a')", ".find('b')", ".get('k')", ".keys()|list", ".items()|list",
                                         ".split('a')", ".lstrip('a')", ".capitalize()"};
        return "(" + Expression(depth - 1) + ")" + kMethods[Pick(16)];
      }
      default: return "(" + Expression(depth - 1) + ", " + Expression(depth - 1) + ")";
    }
  }

  std::string Atom() {
    static const char* kAtoms[] = {"0", "1", "2", "3", "7", "-4", "12", "0.5", "1.25", "-2.0", "1e3", "0.1",
                                   "'a'", "'Ab'", "' x '", "'é'", "''", "'abc'", "none", "true", "false",
                                   "x", "y", "s", "l", "d", "u", "e", "[]", "{}", "t"};
    return kAtoms[Pick(31)];
  }

  // Text, tags and whitespace mixed, to exercise trim_blocks, lstrip_blocks and -/+ markers.
  std::string Whitespace(int depth) {
    std::string out;
    const int parts = 1 + Pick(5);
    for (int i = 0; i < parts; ++i) {
      switch (Pick(6)) {
        case 0: out += Text(); break;
        case 1: out += Open("{{") + " 'v' " + Close("}}"); break;
        case 2: out += Open("{#") + " c " + Close("#}"); break;
        case 3: case 4:
          if (depth > 0) {
            const bool loop = Chance(0.4);
            out += Open("{%") + (loop ? " for i in range(2) " : " if true ") + Close("%}");
            out += Text() + Whitespace(depth - 1) + Text();
            out += Open("{%") + (loop ? " endfor " : " endif ") + Close("%}");
          }
          break;
        default: out += Open("{%") + " set z = 1 " + Close("%}"); break;
      }
      out += Text();
    }
    return out;
  }

 private:
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::string Text() {
    static const char* kTexts[] = {"", "", " ", "  ", "\n", "\n\n", "\t", "a", " b ", "\n  ", "c\n", "  \n ",
                                   "\n\t", "d  "};
    return kTexts[Pick(14)];
  }
  std::string Open(const std::string& tag) {
    const int m = Pick(4);
    return tag + (m == 1 ? "-" : m == 2 && tag != "{{" ? "+" : "");
  }
  std::string Close(const std::string& tag) {
    const int m = Pick(4);
    return (m == 1 ? "-" : m == 2 && tag == "%}" ? "+" : "") + tag;
  }

  std::mt19937 rng_;
};

Json RandomContext() {
  return Json::parse(R"({"x": 3, "y": 2.5, "s": "hello World", "l": [3, 1, 2], "d": {"k": "v", "a": 1},
                         "e": "", "t": [1, "a"]})");
}

std::vector<Case> RandomCases() {
  std::vector<Case> cases;
  Generator gen(20261124);
  for (int i = 0; i < 1200; ++i) {
    Case c;
    c.name = "random-expression-" + std::to_string(i);
    c.source = "{{ " + gen.Expression(3) + " }}";
    c.context = RandomContext();
    cases.push_back(std::move(c));
  }
  for (int i = 0; i < 600; ++i) {
    Case c;
    c.name = "random-whitespace-" + std::to_string(i);
    c.source = gen.Whitespace(2);
    cases.push_back(std::move(c));
  }
  return cases;
}

// Renders every case with jinja2; fails the test when python3 or jinja2 is missing.
Json RunReference(const std::vector<Case>& cases) {
  Json input;
  input["cases"] = Json::array();
  for (const Case& c : cases) input["cases"].push_back({{"template", c.source}, {"context", c.context}});
  const std::string in_path = ::testing::TempDir() + "/jinja_cases_in_" + std::to_string(getpid()) + ".json";
  const std::string out_path = ::testing::TempDir() + "/jinja_cases_out_" + std::to_string(getpid()) + ".json";
  std::ofstream(in_path) << input.dump();
  const std::string cmd = std::string(LLM_PYTHON3) + " " + LLM_SOURCE_DIR + "/tests/chat/jinja_reference.py < " +
                          in_path + " > " + out_path;
  const int status = std::system(cmd.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the jinja2 reference did not run (" << cmd
                  << "): python3 with jinja2 is required (Debian: apt-get install python3-jinja2)";
    return Json();
  }
  return Json::parse(ReadFile(out_path));
}

std::string Quote(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

void CheckAgainstReference(const std::vector<Case>& cases, size_t* compared) {
  Json reference = RunReference(cases);
  ASSERT_TRUE(reference.is_array());
  ASSERT_EQ(reference.size(), cases.size());
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Json& want = reference[i];
    ValueDict context = FromJson(c.context).dict();
    std::string got_text, got_error;
    absl::StatusOr<std::shared_ptr<const Template>> parsed = Template::Parse(c.source);
    absl::Status error = parsed.status();
    if (parsed.ok()) {
      absl::StatusOr<std::string> text = (*parsed)->Render(context);
      if (text.ok()) got_text = *text;
      error = text.status();
    }
    if (!error.ok()) {
      std::optional<ErrorKind> kind = ErrorKindOf(error);
      got_error = kind ? std::string(ErrorClassName(*kind)) : "untyped error";
    }
    const bool ok = want["ok"].get<bool>() ? error.ok() && got_text == want["text"].get<std::string>()
                                           : !error.ok() && got_error == want["error"].get<std::string>();
    ++*compared;
    if (ok) continue;
    if (++failures <= 60) {
      ADD_FAILURE() << "case " << c.name << "\n  template: " << Quote(c.source) << "\n  jinja2:   "
                    << (want["ok"].get<bool>() ? Quote(want["text"].get<std::string>())
                                               : want["error"].get<std::string>() + ": " +
                                                     want["message"].get<std::string>())
                    << "\n  ours:     " << (error.ok() ? Quote(got_text) : std::string(error.message()));
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";
}

TEST(JinjaDifferentialTest, HandWrittenCasesMatchJinja2) {
  std::vector<Case> cases = LoadCases(std::string(LLM_TEST_DATA_DIR) + "/chat/jinja_cases.txt");
  ASSERT_GE(cases.size(), 200u);
  size_t compared = 0;
  CheckAgainstReference(cases, &compared);
  std::printf("compared %zu hand-written cases with jinja2\n", compared);
}

TEST(JinjaDifferentialTest, RandomExpressionAndWhitespaceCasesMatchJinja2) {
  std::vector<Case> cases = RandomCases();
  size_t compared = 0;
  CheckAgainstReference(cases, &compared);
  std::printf("compared %zu random cases with jinja2\n", compared);
}

}  // namespace
}  // namespace llm::chat
