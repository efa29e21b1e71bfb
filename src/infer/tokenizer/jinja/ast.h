// Syntax tree of the Jinja subset that chat templates use (see parser.h for the grammar).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infer/tokenizer/jinja/value.h"

namespace infer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Argument {
  std::string name;  // empty for positional arguments
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items (evaluates to a list)
    kDict,       // keys/items pairwise: items[2i] key, items[2i+1] value
    kGetAttr,    // items[0].name
    kGetItem,    // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null parts allowed)
    kUnary,      // op items[0]: "not", "-", "+"
    kBinary,     // items[0] op items[1]: + - * / // % ** ~ and or
    kCompare,    // items[0] ops[i] items[i+1] ...: == != < <= > >= in "not in"
    kCondition,  // items[1] if items[0] else items[2] (items[2] may be null)
    kFilter,     // items[0] | name(args)
    kTest,       // items[0] is [not] name(args)
    kCall,       // items[0](args)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / operator / filter / test
  bool negated = false;
  std::vector<std::string> ops;
  std::vector<ExprPtr> items;
  std::vector<Argument> args;
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // conditions[i] -> bodies[i]; bodies.back() is else when one longer
    kFor,     // for targets in expr [if condition]: bodies[0], else bodies[1]
    kSet,     // set targets = expr, or set ns.attr = expr (attribute), or block set (body)
    kMacro,   // macro name(params with defaults): bodies[0]
    kBreak,
    kContinue,
    kBlock,  // plain body (generation blocks)
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<ExprPtr> conditions;
  std::vector<std::string> targets;
  std::string attribute;         // set ns.attribute
  std::vector<Argument> params;  // macro parameters (value = default or null)
  std::vector<NodeList> bodies;
};

}  // namespace infer::jinja
