// Tree-walking evaluation of chat templates with Jinja2's scoping: a for-loop iteration gets its
// own scope (so `set` inside a loop does not leak; namespace() is the way out), `if` does not.
#include "infer/tokenizer/jinja/interpreter.h"

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "infer/tokenizer/jinja/builtins.h"
#include "infer/tokenizer/jinja/operators.h"
#include "infer/tokenizer/jinja/parser.h"
#include "infer/tokenizer/utf8.h"

namespace infer::jinja {
namespace {

// Bounds: templates are code from model folders; whatever they do ends within a second or two
// with a clear error, never a hang or an exhausted machine. A real chat template renders a
// conversation in thousands of steps and kilobytes.
constexpr size_t kMaxOutputBytes = size_t{16} << 20;
constexpr size_t kMaxItems = 1'000'000;  // any one list or dict
// Work units: one per node, loop iteration and expression, plus one per 128 bytes of string and
// per 4 items of list or dict each expression yields (copying them is the cost), so that a few
// huge values cost as much as many small steps: the whole budget is at most ~256 MB of copying
// or 2M loop iterations (the costliest kind, ~0.8 us each), a second or two at most. (At one unit
// per KiB, jinja_fuzz found a template that copied 16 MiB strings for 10 s before the budget ran
// out.)
constexpr int64_t kMaxSteps = 2'000'000;
constexpr int kMaxCallDepth = 64;
constexpr int64_t kMaxRangeLength = 1'000'000;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const ValueDict& globals) {
    scopes_.emplace_back();
    for (const auto& [name, value] : globals) scopes_.back()[name] = value;
    DefineBuiltins();
  }

  // Namespaces are the only mutable values a template has, so the only way to a reference cycle
  // (`{% set ns.x = [ns] %}`, which shared ownership alone would never free); emptying every
  // namespace this render made when it ends, normally or by an error, frees any cycle.
  ~Renderer() {
    for (const std::weak_ptr<Namespace>& weak : namespaces_) {
      if (const auto ns = weak.lock()) ValueDict().swap(ns->attributes);
    }
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string Run(const NodeList& program) {
    RenderNodes(program);
    return std::move(out_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  void DefineBuiltins() {
    Scope& globals = scopes_.front();
    const auto define = [&](const char* name, Function fn) {
      if (!globals.count(name)) globals[name] = Value(std::move(fn));
    };
    define("raise_exception", [](const ValueList& args, const ValueDict&) -> Value {
      throw TemplateException(args.empty() ? std::string("raise_exception") : args[0].Str());
    });
    // Local time now; with SOURCE_DATE_EPOCH set (the reproducible-builds convention: seconds
    // since 1970, UTC) that instant in UTC, so that a prompt does not change with the day.
    define("strftime_now", [](const ValueList& args, const ValueDict&) -> Value {
      INFER_CHECK(!args.empty() && args[0].IsString(), "strftime_now expects a format string");
      std::time_t now = std::time(nullptr);
      std::tm local{};
      const char* epoch = std::getenv("SOURCE_DATE_EPOCH");
      char* end = nullptr;
      const long long pinned = epoch != nullptr ? std::strtoll(epoch, &end, 10) : 0;
      if (epoch != nullptr && *epoch != '\0' && end != nullptr && *end == '\0' && pinned >= 0) {
        now = static_cast<std::time_t>(pinned);
        gmtime_r(&now, &local);
      } else {
        localtime_r(&now, &local);
      }
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof(buffer), args[0].AsString().c_str(), &local);
      return Value(std::string(buffer, n));
    });
    define("namespace", [this](const ValueList& args, const ValueDict& kwargs) -> Value {
      auto ns = std::make_shared<Namespace>();
      namespaces_.push_back(ns);
      for (const Value& arg : args) {
        INFER_CHECK(arg.IsDict(), "namespace() takes keyword arguments or a dict");
        ns->attributes = arg.AsDict();
      }
      for (const auto& [key, value] : kwargs) {
        bool replaced = false;
        for (auto& [k, v] : ns->attributes)
          if (k == key) v = value, replaced = true;
        if (!replaced) ns->attributes.emplace_back(key, value);
      }
      return Value(std::move(ns));
    });
    define("range", [](const ValueList& args, const ValueDict&) -> Value {
      INFER_CHECK(!args.empty() && args.size() <= 3, "range expects 1 to 3 arguments");
      for (const Value& arg : args) INFER_CHECK(arg.IsInt(), "range expects integers");
      int64_t start = 0, stop, step = 1;
      if (args.size() == 1) {
        stop = args[0].AsInt();
      } else {
        start = args[0].AsInt();
        stop = args[1].AsInt();
        if (args.size() == 3) step = args[2].AsInt();
      }
      INFER_CHECK(step != 0, "range() arg 3 must not be zero");
      ValueList out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        INFER_CHECK(static_cast<int64_t>(out.size()) < kMaxRangeLength, "range too large");
        out.emplace_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return Value(std::move(out));
    });
    define("dict", [](const ValueList& args, const ValueDict& kwargs) -> Value {
      ValueDict out;
      for (const Value& arg : args) {
        INFER_CHECK(arg.IsDict(), "dict() takes a mapping or keyword arguments");
        out = arg.AsDict();
      }
      for (const auto& entry : kwargs) out.push_back(entry);
      return Value(std::move(out));
    });
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::MakeUndefined(name);
  }

  void Append(const std::string& text) {
    INFER_CHECK(out_.size() + text.size() <= kMaxOutputBytes,
                "chat template output exceeded {} bytes", kMaxOutputBytes);
    out_ += text;
  }

  // One unit of work: every node, loop iteration, macro call and expression.
  void Step(int64_t units = 1) {
    steps_ += units;
    INFER_CHECK(steps_ <= kMaxSteps, "chat template exceeded {} steps (a loop too long?)",
                kMaxSteps);
  }

  static const Value& CheckSize(const Value& value) {
    if (value.IsString()) {
      INFER_CHECK(value.AsString().size() <= kMaxValueBytes,
                  "chat template built a string of {} bytes (the limit is {})",
                  value.AsString().size(), kMaxValueBytes);
    } else if (value.IsList() || value.IsDict()) {
      const size_t items = value.IsList() ? value.AsList().size() : value.AsDict().size();
      INFER_CHECK(items <= kMaxItems, "chat template built a {} of {} items (the limit is {})",
                  value.TypeName(), items, kMaxItems);
    }
    return value;
  }

  // What producing `value` cost beyond the step itself (see kMaxSteps).
  static int64_t Cost(const Value& value) {
    if (value.IsString()) return static_cast<int64_t>(value.AsString().size() >> 7);
    if (value.IsList()) return static_cast<int64_t>(value.AsList().size() >> 2);
    if (value.IsDict()) return static_cast<int64_t>(value.AsDict().size() >> 2);
    return 0;
  }

  Flow RenderNodes(const NodeList& nodes) {
    for (const auto& node : nodes) {
      const Flow flow = RenderNode(*node);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow RenderNode(const Node& node) {
    Step();
    switch (node.kind) {
      case Node::Kind::kText:
        Append(node.text);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        Append(Eval(*node.expr).Str());
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (size_t i = 0; i < node.conditions.size(); ++i)
          if (Eval(*node.conditions[i]).Truthy()) return RenderNodes(node.bodies[i]);
        if (node.bodies.size() > node.conditions.size()) return RenderNodes(node.bodies.back());
        return Flow::kNormal;
      case Node::Kind::kFor:
        RenderFor(node);
        return Flow::kNormal;
      case Node::Kind::kSet:
        RenderSet(node);
        return Flow::kNormal;
      case Node::Kind::kMacro:
        DefineMacro(node);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kBlock:
        return RenderNodes(node.bodies[0]);
    }
    return Flow::kNormal;
  }

  void Assign(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return;
    }
    const ValueList items = Builtins::Iterate(value);
    INFER_CHECK(items.size() == targets.size(), "cannot unpack {} values into {} names",
                items.size(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  void RenderSet(const Node& node) {
    Value value;
    if (node.expr) {
      value = Eval(*node.expr);
    } else {
      std::string saved = std::move(out_);
      out_.clear();
      RenderNodes(node.bodies[0]);
      value = Value(std::move(out_));
      out_ = std::move(saved);
    }
    if (node.attribute.empty()) {
      Assign(node.targets, value);
      return;
    }
    const Value object = Lookup(node.targets[0]);
    INFER_CHECK(object.IsNamespace(), "chat template line {}: cannot assign attribute on {}",
                node.line, object.TypeName());
    for (auto& [key, existing] : object.AsNamespace().attributes) {
      if (key == node.attribute) {
        existing = value;
        return;
      }
    }
    object.AsNamespace().attributes.emplace_back(node.attribute, value);
  }

  void RenderFor(const Node& node) {
    ValueList items = Builtins::Iterate(Eval(*node.expr));
    if (node.condition) {
      ValueList kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Assign(node.targets, item);
        const bool keep = Eval(*node.condition).Truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (node.bodies.size() > 1) RenderNodes(node.bodies[1]);
      return;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Step();
      scopes_.emplace_back();
      ValueDict loop = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(length - i)},
          {"revindex0", Value(length - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == length - 1)},
          {"length", Value(length)},
          {"depth", Value(int64_t{1})},
          {"depth0", Value(int64_t{0})},
          {"previtem", i > 0 ? items[i - 1] : Value::MakeUndefined("previtem")},
          {"nextitem", i + 1 < length ? items[i + 1] : Value::MakeUndefined("nextitem")},
          {"cycle", Value(Function([i](const ValueList& args, const ValueDict&) -> Value {
             INFER_CHECK(!args.empty(), "loop.cycle needs arguments");
             return args[static_cast<size_t>(i) % args.size()];
           }))},
      };
      scopes_.back()["loop"] = Value(std::move(loop));
      Assign(node.targets, items[i]);
      const Flow flow = RenderNodes(node.bodies[0]);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
  }

  void DefineMacro(const Node& node) {
    const Node* macro = &node;
    scopes_.back()[node.text] =
        Value(Function([this, macro](const ValueList& args, const ValueDict& kwargs) -> Value {
          INFER_CHECK(++depth_ <= kMaxCallDepth, "macro recursion too deep");
          INFER_CHECK(args.size() <= macro->params.size(), "macro '{}' takes {} arguments",
                      macro->text, macro->params.size());
          Scope scope;
          for (size_t i = 0; i < macro->params.size(); ++i) {
            const Argument& param = macro->params[i];
            Value value = i < args.size() ? args[i]
                          : param.value   ? Eval(*param.value)
                                          : Value::MakeUndefined(param.name);
            for (const auto& [key, kw] : kwargs)
              if (key == param.name) value = kw;
            scope[param.name] = value;
          }
          std::string saved = std::move(out_);
          out_.clear();
          scopes_.push_back(std::move(scope));
          RenderNodes(macro->bodies[0]);
          scopes_.pop_back();
          Value result(std::move(out_));
          out_ = std::move(saved);
          --depth_;
          return result;
        }));
  }

  void EvalArguments(const std::vector<Argument>& arguments, ValueList& args, ValueDict& kwargs) {
    for (const Argument& argument : arguments) {
      if (argument.name.empty())
        args.push_back(Eval(*argument.value));
      else
        kwargs.emplace_back(argument.name, Eval(*argument.value));
    }
  }

  Value Eval(const Expr& expr) {
    Step();
    Value value = EvalUnchecked(expr);
    CheckSize(value);
    Step(Cost(value));
    return value;
  }

  Value EvalUnchecked(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::kLiteral:
        return expr.value;
      case Expr::Kind::kName:
        return Lookup(expr.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& item : expr.items) items.push_back(Eval(*item));
        if (expr.kind == Expr::Kind::kTuple) return Value::MakeTuple(std::move(items));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict dict;
        for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
          const Value key = Eval(*expr.items[i]);
          INFER_CHECK(key.IsString(), "chat template line {}: dict keys must be strings",
                      expr.line);
          Value value = Eval(*expr.items[i + 1]);
          bool replaced = false;
          for (auto& [k, v] : dict)
            if (k == key.AsString()) v = value, replaced = true;
          if (!replaced) dict.emplace_back(key.AsString(), std::move(value));
        }
        return Value(std::move(dict));
      }
      case Expr::Kind::kGetAttr:
        return Builtins::GetAttr(Eval(*expr.items[0]), expr.name);
      case Expr::Kind::kGetItem:
        return Builtins::GetItem(Eval(*expr.items[0]), Eval(*expr.items[1]));
      case Expr::Kind::kSlice: {
        const Value object = Eval(*expr.items[0]);
        const auto part = [&](size_t i) {
          return expr.items[i] ? Eval(*expr.items[i]) : Value(None{});
        };
        return SliceValue(object, part(1), part(2), part(3));
      }
      case Expr::Kind::kUnary: {
        const Value operand = Eval(*expr.items[0]);
        if (expr.name == "not") return Value(!operand.Truthy());
        if (operand.IsUndefined()) FailUndefined(operand);
        INFER_CHECK(operand.IsNumber(), "bad operand type for unary {}: '{}'", expr.name,
                    operand.TypeName());
        if (expr.name == "+") return operand.IsBool() ? Value(int64_t{operand.AsBool()}) : operand;
        if (operand.IsFloat()) return Value(-operand.AsFloat());
        const int64_t value = operand.IsBool() ? int64_t{operand.AsBool()} : operand.AsInt();
        INFER_CHECK(value != INT64_MIN, "integer overflow");
        return Value(-value);
      }
      case Expr::Kind::kBinary: {
        if (expr.name == "and") {
          Value left = Eval(*expr.items[0]);
          return left.Truthy() ? Eval(*expr.items[1]) : left;
        }
        if (expr.name == "or") {
          Value left = Eval(*expr.items[0]);
          return left.Truthy() ? left : Eval(*expr.items[1]);
        }
        const Value left = Eval(*expr.items[0]);
        const Value right = Eval(*expr.items[1]);
        if (expr.name == "~") return Value(left.Str() + right.Str());
        return Arithmetic(expr.name, left, right);
      }
      case Expr::Kind::kCompare: {
        Value left = Eval(*expr.items[0]);
        for (size_t i = 0; i < expr.ops.size(); ++i) {
          Value right = Eval(*expr.items[i + 1]);
          const std::string& op = expr.ops[i];
          bool result;
          if (op == "==")
            result = Equals(left, right);
          else if (op == "!=")
            result = !Equals(left, right);
          else if (op == "in")
            result = Builtins::Contains(right, left);
          else if (op == "not in")
            result = !Builtins::Contains(right, left);
          else {
            if (left.IsUndefined()) FailUndefined(left);
            if (right.IsUndefined()) FailUndefined(right);
            const int c = Compare(left, right);
            result = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!result) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCondition:
        if (Eval(*expr.items[0]).Truthy()) return Eval(*expr.items[1]);
        return expr.items[2] ? Eval(*expr.items[2]) : Value::MakeUndefined("else");
      case Expr::Kind::kFilter: {
        const Value input = Eval(*expr.items[0]);
        ValueList args;
        ValueDict kwargs;
        EvalArguments(expr.args, args, kwargs);
        return Builtins::Filter(expr.name, input, args, kwargs);
      }
      case Expr::Kind::kTest: {
        const Value input = Eval(*expr.items[0]);
        ValueList args;
        ValueDict kwargs;
        EvalArguments(expr.args, args, kwargs);
        INFER_CHECK(kwargs.empty(), "tests take no keyword arguments");
        return Value(Builtins::Test(expr.name, input, args) != expr.negated);
      }
      case Expr::Kind::kCall:
        return EvalCall(expr);
    }
    Fail("chat template line {}: unsupported expression", expr.line);
  }

  Value EvalCall(const Expr& expr) {
    const Expr& callee = *expr.items[0];
    ValueList args;
    ValueDict kwargs;
    if (callee.kind == Expr::Kind::kGetAttr) {
      const Value object = Eval(*callee.items[0]);
      const Value* member = object.Find(callee.name);
      if (member == nullptr || !member->IsFunction()) {
        EvalArguments(expr.args, args, kwargs);
        return Builtins::Method(object, callee.name, args, kwargs);
      }
    }
    const Value function = Eval(callee);
    if (function.IsUndefined()) {
      Fail("chat template line {}: '{}' is undefined", expr.line, function.UndefinedName());
    }
    INFER_CHECK(function.IsFunction(), "chat template line {}: '{}' object is not callable",
                expr.line, function.TypeName());
    EvalArguments(expr.args, args, kwargs);
    return function.AsFunction()(args, kwargs);
  }

  std::vector<Scope> scopes_;
  std::string out_;
  int depth_ = 0;
  int64_t steps_ = 0;
  std::vector<std::weak_ptr<Namespace>> namespaces_;  // made by this render's namespace()
};

}  // namespace

Template::Template(std::string_view source) {
  INFER_CHECK(IsValidUtf8(source), "chat template is not valid UTF-8");
  program_ = Parse(source);
}

std::string Template::Render(const ValueDict& globals) const {
  try {
    return Renderer(globals).Run(program_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: still one clear error
    Fail("chat template failed: {}", e.what());
  }
}

}  // namespace infer::jinja
