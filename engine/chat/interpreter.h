// Interpreter: the state of one render of a parsed template: scopes, the output buffer, loop
// control, and the sandbox's counters. Scopes follow jinja2's rules: the template's top level, each
// for-loop iteration, each macro call, and with/filter/set blocks get their own; `if` does not.
// Scopes live in an arena for the whole render, so a macro can keep a pointer to the scope it was
// defined in (its closure) for as long as any value can reach it.
#pragma once

#include <cstdint>
#include <ctime>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/ast.h"
#include "engine/chat/value.h"

namespace llm::chat {

// What stops a hostile or broken template before it exhausts the server.
struct RenderLimits {
  int64_t max_output_bytes = 64 << 20;  // the rendered text, and any one string or list built on the way
  int64_t max_iterations = 10'000'000;  // loop iterations and filter steps over items, in total
  int max_call_depth = 200;             // nested macro calls and recursive loop calls
};

class Scope {
 public:
  explicit Scope(Scope* parent) : parent_(parent) {}
  Scope* parent() const { return parent_; }
  const Value* Find(std::string_view name) const {
    for (const auto& [n, v] : vars_)
      if (n == name) return &v;
    return nullptr;
  }
  void Set(std::string_view name, Value value);
  void Clear() { vars_.clear(); }
  bool captured = false;  // a macro defined here keeps this scope as its closure

 private:
  Scope* parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Interpreter {
 public:
  // `context` holds the render's variables (messages, tools, ...); it must outlive the render.
  // `now`: the time strftime_now() formats (one instant for the whole render).
  Interpreter(const ValueDict& context, const RenderLimits& limits, std::time_t now);

  absl::StatusOr<std::string> Run(const StmtList& body);

  // --- variables ---
  // Scopes innermost first, then the context, then the global functions; undefined when none.
  Value Lookup(std::string_view name) const;
  std::time_t now() const { return now_; }
  Scope* scope() const { return scope_; }
  Scope* NewScope(Scope* parent);
  // Makes `scope` current until destroyed.
  class ScopeGuard {
   public:
    ScopeGuard(Interpreter& in, Scope* scope) : in_(in), saved_(in.scope_) { in.scope_ = scope; }
    ~ScopeGuard() { in_.scope_ = saved_; }

   private:
    Interpreter& in_;
    Scope* saved_;
  };
  // Assigns to the current scope (unpacking tuples; `ns.attr` sets a namespace attribute).
  absl::Status Assign(const Target& target, const Value& value);

  // --- output ---
  absl::Status Write(std::string_view text);
  absl::Status WriteValue(const Value& value);
  // Executes `body` in the current scope; stops early on break/continue.
  absl::Status ExecBody(const StmtList& body);
  // Executes `body` in the current scope, writing into a string of its own.
  absl::StatusOr<std::string> Capture(const StmtList& body);

  // --- limits ---
  absl::Status CountIterations(int64_t n = 1);
  // ResourceExhausted when a string or list of `size` bytes or items would pass the limit.
  absl::Status CheckSize(size_t size) const;
  absl::Status EnterCall();
  void LeaveCall() { --call_depth_; }

  enum class LoopSignal { kNone, kBreak, kContinue };
  LoopSignal signal = LoopSignal::kNone;
  Value block_value;  // the rendered body a filter block or block set passes to its filters

 private:
  const ValueDict& context_;
  const RenderLimits limits_;
  const std::time_t now_;
  std::deque<Scope> scopes_;
  Scope* scope_ = nullptr;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace llm::chat
