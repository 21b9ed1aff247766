#include "engine/output/request_streamer.h"

#include <algorithm>

namespace llm {

struct RequestStreamer::RequestState {
  StreamedRequest request;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopStringMatcher> matcher;
  int32_t completion_tokens = 0;  // tokens accepted for the output
  std::vector<int32_t> unsent_tokens;
  std::vector<SampleResult> unsent_logprobs;
  // Set when the streamer itself ended the output (a stop string, or undecodable text): later
  // tokens are dropped, and this reason replaces the engine's in the final output.
  FinishReason stopped = FinishReason::kNone;
  absl::Status stopped_status;
};

RequestStreamer::RequestStreamer(std::shared_ptr<const Tokenizer> tokenizer, int threads, int max_batches,
                                 StopRequest stop_request, Histogram* batch_seconds)
    : tokenizer_(std::move(tokenizer)),
      max_batches_(std::max(1, max_batches)),
      stop_request_(std::move(stop_request)),
      batch_seconds_(batch_seconds) {
  for (int i = 0; i < std::max(1, threads); ++i) shards_.push_back(std::make_unique<Shard>());
  for (auto& shard : shards_) {
    Shard* s = shard.get();
    s->thread = std::thread([this, s] { Run(*s); });
  }
}

RequestStreamer::~RequestStreamer() { Stop(); }

void RequestStreamer::Register(StreamedRequest request) {
  Shard& shard = ShardOf(request.id);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.registered.push_back(std::move(request));
}

void RequestStreamer::AddToken(RequestId id, const SampleResult& sample, bool with_logprobs) {
  Batch& b = ShardOf(id).building;
  Event& e = b.emplace_back();
  e.kind = Event::Kind::kToken;
  e.id = id;
  e.with_logprobs = with_logprobs;
  if (with_logprobs) e.sample = sample;
  else e.sample.token = sample.token;
}

void RequestStreamer::AddFinished(RequestId id, FinishedRequest finished) {
  Batch& b = ShardOf(id).building;
  Event& e = b.emplace_back();
  e.kind = Event::Kind::kFinished;
  e.id = id;
  e.finished = std::move(finished);
}

void RequestStreamer::Flush() {
  for (auto& shard : shards_) {
    Shard& s = *shard;
    if (s.building.empty()) continue;
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return static_cast<int>(s.queue.size()) < max_batches_ || s.stop; });
    s.queue.push_back(std::move(s.building));
    if (!s.spare.empty()) {
      s.building = std::move(s.spare.back());
      s.spare.pop_back();
    } else {
      s.building = Batch();
    }
    s.building.clear();
    s.cv.notify_all();
  }
}

void RequestStreamer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  Flush();
  for (auto& shard : shards_) {
    {
      std::lock_guard<std::mutex> lock(shard->mu);
      shard->stop = true;
    }
    shard->cv.notify_all();
  }
  for (auto& shard : shards_)
    if (shard->thread.joinable()) shard->thread.join();
}

void RequestStreamer::Run(Shard& shard) {
  std::vector<StreamedRequest> registered;
  for (;;) {
    Batch batch;
    {
      std::unique_lock<std::mutex> lock(shard.mu);
      shard.cv.wait(lock, [&] { return !shard.queue.empty() || shard.stop; });
      registered.swap(shard.registered);
      if (shard.queue.empty()) {  // stopping with everything delivered
        if (registered.empty()) return;
      } else {
        batch = std::move(shard.queue.front());
        shard.queue.pop_front();
        shard.cv.notify_all();  // room for the engine
      }
    }
    for (StreamedRequest& r : registered) {
      auto st = std::make_unique<RequestState>();
      const RequestId id = r.id;
      st->request = std::move(r);
      if (st->request.detokenize && tokenizer_) {
        st->detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_, /*skip_special_tokens=*/true);
        st->detokenizer->SetPrefix(st->request.prompt_tokens);
      }
      st->matcher = std::make_unique<StopStringMatcher>(st->request.stop);
      shard.requests[id] = std::move(st);
    }
    registered.clear();
    if (batch.empty()) continue;
    const absl::Time start = absl::Now();
    Process(shard, batch);
    if (batch_seconds_) batch_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
    batch.clear();
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.spare.size() < 4) shard.spare.push_back(std::move(batch));
  }
}

void RequestStreamer::Process(Shard& shard, Batch& batch) {
  for (const Event& e : batch) {
    auto it = shard.requests.find(e.id);
    if (it == shard.requests.end()) continue;  // not a registered request: nothing to deliver
    RequestState& st = *it->second;
    if (e.kind == Event::Kind::kToken) {
      OnToken(shard, st, e);
    } else {
      OnFinished(shard, st, e.finished);
      shard.requests.erase(it);
    }
  }
}

void RequestStreamer::OnToken(Shard& shard, RequestState& st, const Event& e) {
  if (st.stopped != FinishReason::kNone) return;  // past a stop string: never sent
  const int32_t token = e.sample.token;
  ++st.completion_tokens;
  st.unsent_tokens.push_back(token);
  if (e.with_logprobs) st.unsent_logprobs.push_back(e.sample);
  if (st.detokenizer) {
    absl::StatusOr<std::string> text = st.detokenizer->Append(token);
    if (!text.ok()) {
      st.stopped = FinishReason::kError;
      st.stopped_status = text.status();
      stop_request_(st.request.id, FinishReason::kError, text.status());
      return;
    }
    if (st.matcher->Append(*text, st.completion_tokens)) {
      st.stopped = FinishReason::kStop;
      stop_request_(st.request.id, FinishReason::kStop, absl::OkStatus());
      return;
    }
  }
  Emit(st, false, nullptr);
}

void RequestStreamer::OnFinished(Shard& shard, RequestState& st, const FinishedRequest& f) {
  if (st.stopped == FinishReason::kNone && st.detokenizer && f.reason != FinishReason::kCancelled &&
      f.reason != FinishReason::kError) {
    // Release any bytes held back for an incomplete character (a stop string may end in them).
    absl::StatusOr<std::string> rest = st.detokenizer->Finish();
    if (rest.ok() && !rest->empty()) st.matcher->Append(*rest, st.completion_tokens);
  }
  Emit(st, true, &f);
}

void RequestStreamer::Emit(RequestState& st, bool finished, const FinishedRequest* f) {
  RequestOutput out;
  out.id = st.request.id;
  out.token_ids.swap(st.unsent_tokens);
  out.logprobs.swap(st.unsent_logprobs);
  out.text = st.matcher->TakeText(finished);
  out.finished = finished;
  out.prompt_tokens = static_cast<int32_t>(st.request.prompt_tokens.size());
  out.completion_tokens = st.completion_tokens;
  if (finished) {
    const bool own = st.stopped != FinishReason::kNone;
    out.finish_reason = own ? st.stopped : f->reason;
    out.status = own ? st.stopped_status : f->status;
    out.preemptions = f->preemptions;
    out.cached_prompt_tokens = f->cached_prompt_tokens;
    out.timings = f->timings;
  } else if (out.token_ids.empty() && out.text.empty()) {
    return;
  }
  if (st.request.callback) st.request.callback(std::move(out));
}

}  // namespace llm
