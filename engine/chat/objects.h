// The objects templates create or receive: macros (and the `caller` of a call block), the `loop`
// variable of a for loop, namespaces, bound methods of str/dict/list, and built-in functions.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/chat/ast.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/value.h"

namespace llm::chat {

class MacroObject : public Object {
 public:
  MacroObject(std::shared_ptr<const MacroDef> def, Scope* closure, Value caller = Value())
      : def_(std::move(def)), closure_(closure), caller_(std::move(caller)) {}
  std::string_view TypeName() const override { return "Macro"; }
  std::string Repr() const override;
  Value GetAttr(std::string_view name) const override;
  bool IsCallable() const override { return true; }
  absl::StatusOr<Value> Call(CallArgs args, Interpreter& in) const override;

 private:
  std::shared_ptr<const MacroDef> def_;
  Scope* closure_;
  Value caller_;  // for a call block's macro call: the `caller` it receives
};

// `loop` inside a for loop. Updated in place each iteration; callable in recursive loops.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  using Recurse = std::function<absl::StatusOr<Value>(const Value& items, int depth)>;
  LoopObject(std::shared_ptr<const ValueList> items, int depth, Recurse recurse)
      : items_(std::move(items)), depth_(depth), recurse_(std::move(recurse)) {}
  void set_index(int64_t index0) { index0_ = index0; }
  std::string_view TypeName() const override { return "LoopContext"; }
  std::string Repr() const override;
  Value GetAttr(std::string_view name) const override;
  bool IsCallable() const override { return true; }
  absl::StatusOr<Value> Call(CallArgs args, Interpreter& in) const override;

 private:
  std::shared_ptr<const ValueList> items_;
  int64_t index0_ = 0;
  int depth_;
  Recurse recurse_;
  mutable std::vector<Value> last_changed_;  // loop.changed() state
  mutable bool changed_called_ = false;
};

class NamespaceObject : public Object {
 public:
  explicit NamespaceObject(ValueDict attrs) : attrs_(std::move(attrs)) {}
  std::string_view TypeName() const override { return "Namespace"; }
  std::string Repr() const override;
  Value GetAttr(std::string_view name) const override;
  absl::Status SetAttr(std::string_view name, Value value) override;

 private:
  ValueDict attrs_;
};

// A built-in function (a global, or a method bound to its receiver).
class FunctionObject : public Object {
 public:
  using Fn = std::function<absl::StatusOr<Value>(CallArgs& args, Interpreter& in)>;
  FunctionObject(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string_view TypeName() const override { return "builtin_function_or_method"; }
  std::string Repr() const override { return "<built-in function " + name_ + ">"; }
  bool IsCallable() const override { return true; }
  absl::StatusOr<Value> Call(CallArgs args, Interpreter& in) const override { return fn_(args, in); }

 private:
  std::string name_;
  Fn fn_;
};

}  // namespace llm::chat
