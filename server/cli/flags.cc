#include "server/cli/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llm::cli {

void FlagSet::String(const std::string& name, std::string* value, const std::string& help) {
  flags_.push_back({name, help, value->empty() ? "" : *value, true, false, [value](const std::string& v) {
                      *value = v;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), true, false, [value, name](const std::string& v) {
                      if (!absl::SimpleAtoi(v, value))
                        return absl::InvalidArgumentError(absl::StrCat("--", name, " expects an integer, got '", v, "'"));
                      return absl::OkStatus();
                    }});
}

void FlagSet::Float(const std::string& name, double* value, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*value), true, false, [value, name](const std::string& v) {
                      if (!absl::SimpleAtod(v, value) || !std::isfinite(*value))
                        return absl::InvalidArgumentError(absl::StrCat("--", name, " expects a number, got '", v, "'"));
                      return absl::OkStatus();
                    }});
}

void FlagSet::Bool(const std::string& name, bool* value, const std::string& help) {
  flags_.push_back({name, help, "", false, false, [value](const std::string&) {
                      *value = true;
                      return absl::OkStatus();
                    }});
}

void FlagSet::StringList(const std::string& name, std::vector<std::string>* values, const std::string& help) {
  flags_.push_back({name, help + " (repeatable)", "", true, false, [values](const std::string& v) {
                      values->push_back(v);
                      return absl::OkStatus();
                    }});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

bool FlagSet::IsSet(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return f.set;
  return false;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return absl::OkStatus();
    }
    if (arg == "--version") {
      version_ = true;
      return absl::OkStatus();
    }
    if (arg.rfind("--", 0) != 0)
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (!flag) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (flag->takes_value && !has_value) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    } else if (!flag->takes_value && has_value) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
    }
    if (absl::Status s = flag->assign(value); !s.ok()) return s;
    flag->set = true;
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " ", command_, " [flags]\n\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name, f.takes_value ? " VALUE" : "");
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default: ", f.default_text, ")");
    out += "\n";
  }
  return out;
}

std::string VersionString() {
  const std::string commit = LLM_GIT_COMMIT;
  return commit.empty() ? std::string(LLM_VERSION) : absl::StrCat(LLM_VERSION, " (commit ", commit, ")");
}

std::optional<int> HandleParse(FlagSet& flags, int argc, char** argv) {
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    const char* program = flags.program().c_str();
    std::fprintf(stderr, "%s %s: %s\n(run '%s %s --help' for usage)\n", program, argv[0],
                 std::string(s.message()).c_str(), program, argv[0]);
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (flags.version_requested()) {
    std::printf("%s %s\n", flags.program().c_str(), VersionString().c_str());
    return 0;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBiasFlag(const std::string& text) {
  std::vector<std::pair<int32_t, float>> biases;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
    int32_t token;
    float bias;
    if (!absl::SimpleAtoi(kv.first, &token) || !absl::SimpleAtof(kv.second, &bias))
      return absl::InvalidArgumentError(absl::StrCat("--logit-bias: '", std::string(part), "' is not ID:BIAS"));
    biases.emplace_back(token, bias);
  }
  return biases;
}

}  // namespace llm::cli
