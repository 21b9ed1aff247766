// FlagSet: the command-line flags of one `llm` subcommand. Each flag is declared with a help
// line and bound to a variable; Parse() rejects unknown flags and bad values with a message, and
// --help prints the generated usage. Flags are read in main() only and passed down as structs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llm::cli {

class FlagSet {
 public:
  // `program` names the binary in usage and error lines ("llm", "llm_client").
  FlagSet(std::string command, std::string summary, std::string program = "llm")
      : program_(std::move(program)), command_(std::move(command)), summary_(std::move(summary)) {}

  void String(const std::string& name, std::string* value, const std::string& help);
  void Int(const std::string& name, int64_t* value, const std::string& help);
  void Float(const std::string& name, double* value, const std::string& help);
  void Bool(const std::string& name, bool* value, const std::string& help);  // --name sets true
  // Repeatable: each occurrence appends.
  void StringList(const std::string& name, std::vector<std::string>* values, const std::string& help);

  // argv[0] is the subcommand. Sets help_requested() on --help/-h.
  absl::Status Parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  bool version_requested() const { return version_; }
  bool IsSet(const std::string& name) const;
  const std::string& program() const { return program_; }
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool takes_value = true;
    bool set = false;
    std::function<absl::Status(const std::string&)> assign;
  };
  Flag* Find(const std::string& name);

  std::string program_;
  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
  bool version_ = false;
};

// "0.1.0 (commit abc1234)": what --version prints after the program's name.
std::string VersionString();

// Runs a subcommand: prints usage on --help and the version on --version (exit 0), the error and
// a hint on a bad flag (exit 2).
// Returns std::nullopt when the command should go on.
std::optional<int> HandleParse(FlagSet& flags, int argc, char** argv);

// The value of --logit-bias ("ID:BIAS,ID:BIAS"), in order, duplicates kept: token ids and their
// ranges are the engine's to check. InvalidArgument names the piece that is not ID:BIAS.
absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBiasFlag(const std::string& text);

}  // namespace llm::cli
