// RequestStreamer: the output side of the engine. The engine thread decides what happened to each
// request (a token was sampled, the request finished) and hands that over as events; output
// threads of the streamer turn them into the RequestOutputs that the requests' callbacks get:
// incremental detokenization, stop strings, held-back text, usage and timings. So the engine
// thread only schedules and launches, and a callback's cost (protobuf, stream writes, metrics)
// never delays a step.
//
// Requests are spread over the output threads by id; each thread sees one request's events in the
// order the engine pushed them. The queue between the engine and each thread holds a bounded
// number of step batches: an output thread that falls that far behind makes the engine wait
// (backpressure) rather than grow memory without bound.
//
// A stop string is found here, after the engine may already have run further steps for the
// request. The streamer then sends nothing past the token that completed it and asks the engine
// (`stop_request`) to finish the request; the final output follows the engine's finish event, so
// that the request's blocks are free before its last update is delivered, as for every other
// finish.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/histogram.h"
#include "engine/request.h"
#include "engine/scheduler/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {

// What the streamer needs of one request, handed over at submission.
struct StreamedRequest {
  RequestId id = 0;
  OutputCallback callback;
  StopCriteria stop;
  std::vector<int32_t> prompt_tokens;  // context for the detokenizer
  bool detokenize = false;             // with a tokenizer only
  int32_t num_top_logprobs = 0;
};

// The engine's view of a finished request, for its final output.
struct FinishedRequest {
  FinishReason reason = FinishReason::kNone;
  absl::Status status;
  int32_t preemptions = 0;
  int32_t cached_prompt_tokens = 0;
  RequestTimings timings;
};

class RequestStreamer {
 public:
  // Asks the engine to finish a request the streamer stopped (a stop string, or text that could
  // not be detokenized): called on an output thread; must not block.
  using StopRequest = std::function<void(RequestId, FinishReason, absl::Status)>;

  // `tokenizer` may be null (no request then asks for text). `threads` >= 1. `max_batches`: step
  // batches queued per thread before the engine waits.
  RequestStreamer(std::shared_ptr<const Tokenizer> tokenizer, int threads, int max_batches, StopRequest stop_request,
                  Histogram* batch_seconds);
  ~RequestStreamer();  // Stop()

  // Any thread, before the engine can emit anything for the request.
  void Register(StreamedRequest request);

  // Engine thread: events of one step, then Flush() hands them to the output threads.
  void AddToken(RequestId id, const SampleResult& sample, bool with_logprobs);
  void AddFinished(RequestId id, FinishedRequest finished);
  void Flush();

  // Delivers everything queued, then stops the output threads.
  void Stop();

 private:
  struct Event {
    enum class Kind : uint8_t { kToken, kFinished };
    Kind kind = Kind::kToken;
    RequestId id = 0;
    bool with_logprobs = false;
    SampleResult sample;
    FinishedRequest finished;
  };
  using Batch = std::vector<Event>;  // one engine step's events
  struct RequestState;
  struct Shard {
    std::mutex mu;
    std::condition_variable cv;         // work arrived, or room in the queue
    std::deque<Batch> queue;            // step batches, oldest first
    // Registered requests not yet taken by the output thread: it takes them before each batch, so
    // a request is known before any event of it.
    std::vector<StreamedRequest> registered;
    bool stop = false;
    Batch building;                     // engine thread: this step's events, not yet flushed
    std::vector<Batch> spare;           // emptied batches, reused (no allocation per step)
    std::thread thread;
    std::unordered_map<RequestId, std::unique_ptr<RequestState>> requests;  // output thread only
  };

  Shard& ShardOf(RequestId id) { return *shards_[id % shards_.size()]; }
  void Run(Shard& shard);
  void Process(Shard& shard, Batch& batch);
  void OnToken(Shard& shard, RequestState& st, const Event& e);
  void OnFinished(Shard& shard, RequestState& st, const FinishedRequest& f);
  // Sends what `st` has accumulated (tokens, releasable text); nothing when there is nothing.
  void Emit(RequestState& st, bool finished, const FinishedRequest* f);

  std::shared_ptr<const Tokenizer> tokenizer_;
  const int max_batches_;
  StopRequest stop_request_;
  Histogram* batch_seconds_;
  std::vector<std::unique_ptr<Shard>> shards_;
  bool stopped_ = false;
};

}  // namespace llm
