// A prompt dataset file: the requests of a load test, with the output length each should have.
// Read as JSON Lines (one object a line) or as one JSON array of objects. Each object is one of:
//   {"prompt": "...", "output_len": 128}                  (also "max_tokens"; "prompt_len" optional)
//   {"prompt": "...", "completion": "..."}                 (also "output", "response")
//   {"prompt_token_ids": [1, 2, 3], "output_len": 128}
//   {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}
//                                                           (ShareGPT: the first human turn is the
//                                                           prompt, the reply after it the output)
//   {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}
// Entries without a usable prompt (or, for conversations, without a reply) are skipped and
// counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llm::loadtest {

struct DatasetEntry {
  std::string prompt;  // text; empty when prompt_token_ids is given
  std::vector<int32_t> prompt_token_ids;
  int64_t prompt_len = 0;        // given in the file; 0: unknown (count it)
  int64_t output_len = 0;        // given in the file; 0: count the reference output
  std::string reference_output;  // the reply whose length is the output length
};

struct Dataset {
  std::vector<DatasetEntry> entries;
  int64_t skipped = 0;
};

absl::StatusOr<Dataset> LoadDataset(const std::string& path);
// The same from the file's contents (tests).
absl::StatusOr<Dataset> ParseDataset(const std::string& contents);

}  // namespace llm::loadtest
