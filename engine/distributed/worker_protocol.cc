#include "engine/distributed/worker_protocol.h"

#include "absl/strings/str_cat.h"
#include "engine/distributed/step_message.h"
#include "engine/distributed/wire_format.h"

namespace llm {
namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
// Bumped whenever a frame's layout changes: a worker of another build is refused, not misread.
constexpr uint32_t kProtocolVersion = 1;

}  // namespace

std::string EncodeHello(const WorkerHello& h) {
  std::string out;
  wire::Writer w(out);
  w.Put(kHelloMagic);
  w.Put(kProtocolVersion);
  w.Put(h.session);
  w.Put(h.replica);
  w.Put(h.generation);
  w.PutString(EncodeFingerprint(h.settings));
  const EngineInfo& i = h.limits.info;
  w.Put(i.max_context);
  w.Put(i.max_tokens_per_step);
  w.Put(i.max_seqs);
  w.Put(i.kv_blocks);
  w.Put(i.kv_block_size);
  w.Put(h.limits.block_table_width);
  w.Put(h.limits.max_in_flight);
  w.Put(static_cast<uint8_t>(h.limits.chains_steps));
  w.Put(h.load_seconds);
  return out;
}

absl::StatusOr<WorkerHello> DecodeHello(std::string_view bytes) {
  wire::Reader r(bytes);
  WorkerHello h;
  uint32_t magic = 0, version = 0;
  if (!r.Get(magic) || magic != kHelloMagic) return absl::DataLossError("not a worker hello");
  if (!r.Get(version) || version != kProtocolVersion)
    return absl::FailedPreconditionError(absl::StrCat("the worker speaks protocol version ", version, ", this front end ",
                                                      kProtocolVersion, " (run the same llm build on both sides)"));
  std::string settings;
  EngineInfo& i = h.limits.info;
  uint8_t chains = 0;
  const bool ok = r.Get(h.session) && r.Get(h.replica) && r.Get(h.generation) && r.GetString(settings) &&
                  r.Get(i.max_context) && r.Get(i.max_tokens_per_step) && r.Get(i.max_seqs) && r.Get(i.kv_blocks) &&
                  r.Get(i.kv_block_size) && r.Get(h.limits.block_table_width) && r.Get(h.limits.max_in_flight) &&
                  r.Get(chains) && r.Get(h.load_seconds) && r.done();
  if (!ok) return absl::DataLossError("malformed worker hello");
  h.limits.chains_steps = chains != 0;
  ASSIGN_OR_RETURN(h.settings, DecodeFingerprint(settings));
  return h;
}

void EncodeStepResults(const absl::Status& status, const StepDeviceTiming& timing,
                       absl::Span<const SampleResult> results, std::string& out) {
  std::string samples;
  if (status.ok()) EncodeSampleResults(results, samples);
  wire::Writer w(out);
  w.Put(static_cast<uint32_t>(status.code()));
  w.PutString(std::string(status.message()));
  w.Put(timing.device_ms);
  w.Put(timing.idle_ms);
  w.Put(static_cast<uint8_t>(timing.valid));
  w.PutString(samples);
}

absl::Status DecodeStepResults(std::string_view bytes, absl::Span<SampleResult> results, StepDeviceTiming* timing) {
  wire::Reader r(bytes);
  uint32_t code = 0;
  std::string message, samples;
  StepDeviceTiming t;
  uint8_t valid = 0;
  if (!(r.Get(code) && r.GetString(message) && r.Get(t.device_ms) && r.Get(t.idle_ms) && r.Get(valid) &&
        r.GetString(samples) && r.done()))
    return absl::DataLossError("malformed step results from the worker group");
  if (code != 0)
    return absl::Status(static_cast<absl::StatusCode>(code), absl::StrCat("the worker group failed the step: ", message));
  t.valid = valid != 0;
  if (timing) *timing = t;
  return DecodeSampleResults(samples, results);
}

}  // namespace llm
