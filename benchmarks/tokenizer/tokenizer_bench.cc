// Tokenizer benchmark: load time of each tokenizer.json and single-thread encode / decode
// throughput over the reference corpus (multilingual man pages, code, licences, edge cases)
// repeated to a few MB. Every run first checks the ids against the reference library's.
//
//   tokenizer_bench [--data_dir=DIR] [--cases_dir=DIR] [--mb=4] [--names=llama2,llama3,qwen3]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"

namespace {

struct Options {
  std::string data_dir = LLM_BENCH_TOKENIZER_DIR;
  std::string cases_dir = LLM_BENCH_CASES_DIR;
  double megabytes = 4.0;
  std::vector<std::string> names = {"llama2", "llama3", "qwen3"};
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "tokenizer_bench: %s\n", message.c_str());
  std::exit(1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot open " + path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const std::string& flag) -> const char* {
      return arg.rfind(flag + "=", 0) == 0 ? argv[i] + flag.size() + 1 : nullptr;
    };
    if (const char* v = value("--data_dir")) {
      options.data_dir = v;
    } else if (const char* v = value("--cases_dir")) {
      options.cases_dir = v;
    } else if (const char* v = value("--mb")) {
      options.megabytes = std::atof(v);
    } else if (const char* v = value("--names")) {
      options.names.clear();
      std::stringstream list(v);
      for (std::string name; std::getline(list, name, ',');) options.names.push_back(name);
    } else {
      Die("unknown argument " + arg + " (flags: --data_dir= --cases_dir= --mb= --names=)");
    }
  }
  return options;
}

// Timing uses this thread's CPU time (user + system), not wall time: on a VM shared with other
// jobs, wall time mostly measures the neighbors. On an idle machine the two agree.
class CpuTimer {
 public:
  CpuTimer() : start_(Now()) {}
  double Seconds() const { return Now() - start_; }

 private:
  static double Now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  double start_;
};

struct Row {
  std::string name;
  double load_ms;
  double encode_mb_s;        // one Encode per corpus text (prompt-sized calls)
  double encode_bulk_mb_s;   // 64 KiB chunks of the concatenated corpus
  double decode_mtok_s;      // one Decode per corpus text, million tokens per second
  double bytes_per_token;
};

Row Run(const Options& options, const std::string& name) {
  Row row{name, 0, 0, 0, 0, 0};
  const std::string json = ReadFile(options.data_dir + "/" + name + "-tokenizer.json");
  const std::string config = ReadFile(options.cases_dir + "/" + name + "-tokenizer_config.json");
  const CpuTimer load_timer;
  auto loaded = llm::Tokenizer::FromJson(json, config);
  row.load_ms = load_timer.Seconds() * 1e3;
  if (!loaded.ok()) Die(name + ": " + loaded.status().ToString());
  const llm::Tokenizer& tokenizer = **loaded;

  // Data check: the corpus must encode to the reference ids before anything is timed.
  const auto cases = nlohmann::json::parse(ReadFile(options.cases_dir + "/" + name + "-cases.json"));
  std::vector<std::string> texts;
  size_t corpus_bytes = 0, corpus_tokens = 0;
  std::vector<std::vector<int32_t>> corpus_ids;
  for (const auto& c : cases.at("cases")) {
    texts.push_back(c.at("text").get<std::string>());
    const auto ids = tokenizer.Encode(texts.back(), false);
    if (!ids.ok() || *ids != c.at("ids").get<std::vector<int32_t>>()) Die(name + ": ids differ from reference");
    corpus_bytes += texts.back().size();
    corpus_tokens += ids->size();
    corpus_ids.push_back(*ids);
  }
  row.bytes_per_token = static_cast<double>(corpus_bytes) / corpus_tokens;
  const size_t target = static_cast<size_t>(options.megabytes * 1024 * 1024);
  const size_t rounds = std::max<size_t>(1, target / corpus_bytes);

  size_t sink = 0;  // keeps the work observable
  const CpuTimer encode_timer;
  for (size_t r = 0; r < rounds; ++r) {
    for (const std::string& text : texts) sink += tokenizer.Encode(text, false)->size();
  }
  row.encode_mb_s = rounds * corpus_bytes / encode_timer.Seconds() / 1e6;

  std::string all;
  while (all.size() < target) {
    for (const std::string& text : texts) (all += text) += '\n';
  }
  constexpr size_t kChunk = 64 * 1024;
  const CpuTimer bulk_timer;
  for (size_t pos = 0; pos < all.size();) {
    // Cut at a line end so chunks stay valid UTF-8.
    size_t end = std::min(all.size(), pos + kChunk);
    if (end < all.size()) end = all.rfind('\n', end) + 1;
    sink += tokenizer.Encode(std::string_view(all).substr(pos, end - pos), false)->size();
    pos = end;
  }
  row.encode_bulk_mb_s = all.size() / bulk_timer.Seconds() / 1e6;

  const CpuTimer decode_timer;
  for (size_t r = 0; r < rounds; ++r) {
    for (const auto& ids : corpus_ids) sink += tokenizer.Decode(ids, false)->size();
  }
  row.decode_mtok_s = rounds * corpus_tokens / decode_timer.Seconds() / 1e6;
  if (sink == 0) Die("nothing was encoded");
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  std::printf("tokenizer_bench: %.1f MB of corpus text per measurement, one thread, thread CPU time; "
              "ids checked\n",
              options.megabytes);
  std::printf("%-8s %10s %16s %16s %14s %12s\n", "name", "load ms", "encode MB/s", "encode bulk MB/s",
              "decode Mtok/s", "bytes/token");
  for (const std::string& name : options.names) {
    const Row row = Run(options, name);
    std::printf("%-8s %10.1f %16.2f %16.2f %14.2f %12.2f\n", row.name.c_str(), row.load_ms, row.encode_mb_s,
                row.encode_bulk_mb_s, row.decode_mtok_s, row.bytes_per_token);
  }
  return 0;
}
