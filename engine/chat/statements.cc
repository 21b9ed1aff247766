// Execution of statement nodes (ast.h).
#include "engine/chat/cat.h"
#include "engine/chat/ast.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/objects.h"
#include "engine/chat/operations.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

// One pass of a for loop over `iterable` at `depth`, writing to the current output.
absl::Status RunLoop(const ForStmt& loop, Interpreter& in, const Value& iterable, int depth) {
  ASSIGN_OR_RETURN(ValueList all, Iterate(iterable, in));
  Scope* outer = in.scope();
  auto items = std::make_shared<ValueList>();
  if (loop.filter) {
    Scope* probe = in.NewScope(outer);
    Interpreter::ScopeGuard guard(in, probe);
    for (Value& item : all) {
      RETURN_IF_ERROR(in.CountIterations());
      probe->Clear();
      RETURN_IF_ERROR(in.Assign(loop.target, item));
      ASSIGN_OR_RETURN(Value keep, loop.filter->Eval(in));
      if (keep.Truthy()) items->push_back(std::move(item));
    }
  } else {
    *items = std::move(all);
  }
  if (items->empty()) {
    Interpreter::ScopeGuard guard(in, in.NewScope(outer));
    return in.ExecBody(loop.else_body);
  }
  LoopObject::Recurse recurse;
  if (loop.recursive) {
    recurse = [&loop, &in](const Value& children, int child_depth) -> absl::StatusOr<Value> {
      RETURN_IF_ERROR(in.EnterCall());
      struct Leave {
        Interpreter& in;
        ~Leave() { in.LeaveCall(); }
      } leave{in};
      StmtList none;
      // Render the nested pass into a string of its own: loop(...) returns its output.
      std::string text;
      {
        struct Body : Stmt {
          Body(const ForStmt& l, const Value& c, int d) : Stmt(l.line), loop(l), children(c), depth(d) {}
          absl::Status Exec(Interpreter& in) const override { return RunLoop(loop, in, children, depth); }
          const ForStmt& loop;
          const Value& children;
          int depth;
        };
        StmtList body;
        body.push_back(std::make_unique<Body>(loop, children, child_depth));
        const Interpreter::LoopSignal saved = in.signal;
        absl::StatusOr<std::string> captured = in.Capture(body);
        in.signal = saved;
        if (!captured.ok()) return captured.status();
        text = *std::move(captured);
      }
      return Value::String(std::move(text));
    };
  }
  auto loop_object = std::make_shared<LoopObject>(items, depth, std::move(recurse));
  const Value loop_value = Value::FromObject(loop_object);
  Scope* scope = in.NewScope(outer);
  for (size_t i = 0; i < items->size(); ++i) {
    RETURN_IF_ERROR(in.CountIterations());
    if (scope->captured) {
      scope = in.NewScope(outer);
    } else {
      scope->Clear();
    }
    Interpreter::ScopeGuard guard(in, scope);
    loop_object->set_index(static_cast<int64_t>(i));
    scope->Set("loop", loop_value);
    RETURN_IF_ERROR(in.Assign(loop.target, (*items)[i]));
    RETURN_IF_ERROR(in.ExecBody(loop.body));
    if (in.signal == Interpreter::LoopSignal::kBreak) {
      in.signal = Interpreter::LoopSignal::kNone;
      break;
    }
    in.signal = Interpreter::LoopSignal::kNone;
  }
  return absl::OkStatus();
}

// Renders `body` in a new scope and passes the text through `filter` (when there is one).
absl::StatusOr<Value> FilteredBody(const StmtList& body, const Expr* filter, Interpreter& in) {
  std::string text;
  {
    Interpreter::ScopeGuard guard(in, in.NewScope(in.scope()));
    ASSIGN_OR_RETURN(text, in.Capture(body));
  }
  if (filter == nullptr) return Value::String(std::move(text));
  in.block_value = Value::String(std::move(text));
  absl::StatusOr<Value> result = filter->Eval(in);
  in.block_value = Value();
  return result;
}

}  // namespace

absl::Status TextStmt::Exec(Interpreter& in) const { return in.Write(text); }

absl::Status OutputStmt::Exec(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value v, expr->Eval(in));
  return in.WriteValue(v);
}

absl::Status IfStmt::Exec(Interpreter& in) const {
  for (const auto& [test, body] : branches) {
    ASSIGN_OR_RETURN(Value t, test->Eval(in));
    if (t.Truthy()) return in.ExecBody(body);
  }
  return in.ExecBody(else_body);
}

absl::Status ForStmt::Exec(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value iterable, iter->Eval(in));
  return RunLoop(*this, in, iterable, 1);
}

absl::Status SetStmt::Exec(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value v, value->Eval(in));
  return in.Assign(target, v);
}

absl::Status SetBlockStmt::Exec(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value v, FilteredBody(body, filter.get(), in));
  return in.Assign(target, v);
}

absl::Status MacroStmt::Exec(Interpreter& in) const {
  in.scope()->captured = true;
  in.scope()->Set(def->name, Value::FromObject(std::make_shared<MacroObject>(def, in.scope())));
  return absl::OkStatus();
}

absl::Status CallBlockStmt::Exec(Interpreter& in) const {
  in.scope()->captured = true;
  Value caller_value = Value::FromObject(std::make_shared<MacroObject>(caller, in.scope()));
  Value fn;
  if (const auto* attr = dynamic_cast<const AttrExpr*>(call->callee.get())) {
    ASSIGN_OR_RETURN(Value obj, attr->object->Eval(in));
    ASSIGN_OR_RETURN(fn, GetAttribute(obj, attr->name));
  } else {
    ASSIGN_OR_RETURN(fn, call->callee->Eval(in));
  }
  ASSIGN_OR_RETURN(CallArgs args, call->args.Eval(in));
  args.keywords.emplace_back("caller", std::move(caller_value));
  ASSIGN_OR_RETURN(Value result, CallValue(fn, std::move(args), in));
  return in.WriteValue(result);
}

absl::Status FilterBlockStmt::Exec(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value v, FilteredBody(body, filter.get(), in));
  return in.WriteValue(v);
}

absl::Status WithStmt::Exec(Interpreter& in) const {
  std::vector<Value> values;
  for (const auto& [target, expr] : assignments) {
    ASSIGN_OR_RETURN(Value v, expr->Eval(in));
    values.push_back(std::move(v));
  }
  Interpreter::ScopeGuard guard(in, in.NewScope(in.scope()));
  for (size_t i = 0; i < values.size(); ++i) RETURN_IF_ERROR(in.Assign(assignments[i].first, values[i]));
  return in.ExecBody(body);
}

absl::Status ScopedBodyStmt::Exec(Interpreter& in) const {
  Interpreter::ScopeGuard guard(in, in.NewScope(in.scope()));
  return in.ExecBody(body);
}

absl::Status FailStmt::Exec(Interpreter& in) const { return TemplateError(kind, message); }

absl::Status LoopControlStmt::Exec(Interpreter& in) const {
  in.signal = is_break ? Interpreter::LoopSignal::kBreak : Interpreter::LoopSignal::kContinue;
  return absl::OkStatus();
}

}  // namespace llm::chat
