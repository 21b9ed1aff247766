#include "engine/chat/interpreter.h"

#include "engine/chat/cat.h"
#include "engine/chat/builtins.h"
#include "engine/chat/operations.h"
#include "kernels/core/status.h"

namespace llm::chat {

void Scope::Set(std::string_view name, Value value) {
  for (auto& [n, v] : vars_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

Interpreter::Interpreter(const ValueDict& context, const RenderLimits& limits, std::time_t now)
    : context_(context), limits_(limits), now_(now) {}

absl::StatusOr<std::string> Interpreter::Run(const StmtList& body) {
  scope_ = NewScope(nullptr);
  std::string out;
  out_ = &out;
  RETURN_IF_ERROR(ExecBody(body));
  return out;
}

Value Interpreter::Lookup(std::string_view name) const {
  for (const Scope* s = scope_; s != nullptr; s = s->parent())
    if (const Value* v = s->Find(name)) return *v;
  if (const Value* v = context_.Find(name)) return *v;
  Value global = FindGlobal(name);
  if (!global.is_undefined()) return global;
  return Value::Undefined(Cat("'", name, "' is undefined"));
}

Scope* Interpreter::NewScope(Scope* parent) {
  scopes_.emplace_back(parent);
  return &scopes_.back();
}

absl::Status Interpreter::Assign(const Target& target, const Value& value) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope_->Set(target.name, value);
      return absl::OkStatus();
    case Target::Kind::kNamespaceAttr: {
      Value ns = Lookup(target.name);
      if (!ns.is_object() || ns.object()->TypeName() != "Namespace")
        return TemplateError(ErrorKind::kRuntime, "cannot assign attribute on non-namespace object");
      return ns.object()->SetAttr(target.attr, value);
    }
    case Target::Kind::kTuple: {
      ASSIGN_OR_RETURN(ValueList items, Iterate(value, *this));
      if (items.size() != target.items.size()) {
        return TemplateError(ErrorKind::kValue,
                             items.size() < target.items.size()
                                 ? Cat("not enough values to unpack (expected ", target.items.size(),
                                                ", got ", items.size(), ")")
                                 : Cat("too many values to unpack (expected ", target.items.size(), ")"));
      }
      for (size_t i = 0; i < items.size(); ++i) RETURN_IF_ERROR(Assign(target.items[i], items[i]));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Write(std::string_view text) {
  if (out_->size() + text.size() > static_cast<size_t>(limits_.max_output_bytes))
    return TemplateError(ErrorKind::kLimit, Cat("output exceeds the limit of ", limits_.max_output_bytes,
                                                         " bytes"));
  out_->append(text);
  return absl::OkStatus();
}

absl::Status Interpreter::WriteValue(const Value& value) {
  if (value.is_string()) return Write(value.str());
  if (value.is_undefined()) return absl::OkStatus();
  return Write(value.Str());
}

absl::Status Interpreter::ExecBody(const StmtList& body) {
  for (const StmtPtr& stmt : body) {
    RETURN_IF_ERROR(WithLine(stmt->Exec(*this), stmt->line));
    if (signal != LoopSignal::kNone) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const StmtList& body) {
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  absl::Status status = ExecBody(body);
  out_ = saved;
  RETURN_IF_ERROR(status);
  return captured;
}

absl::Status Interpreter::CountIterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_iterations)
    return TemplateError(ErrorKind::kLimit, Cat("more than ", limits_.max_iterations,
                                                         " loop iterations in one render"));
  return absl::OkStatus();
}

absl::Status Interpreter::CheckSize(size_t size) const {
  if (size > static_cast<size_t>(limits_.max_output_bytes))
    return TemplateError(ErrorKind::kLimit, Cat("a value exceeds the limit of ", limits_.max_output_bytes,
                                                         " bytes or items"));
  return absl::OkStatus();
}

absl::Status Interpreter::EnterCall() {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    return TemplateError(ErrorKind::kLimit, Cat("macro calls nested deeper than ", limits_.max_call_depth));
  }
  return absl::OkStatus();
}

}  // namespace llm::chat
