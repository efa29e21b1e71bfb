// Recursive-descent parser with Jinja2's precedence: condexpr < or < and < not < compare < +,- < ~
// < *,/,//,% < ** < unary, and filters/tests binding to the unary expression.
#include "infer/tokenizer/jinja/parser.h"

#include <set>

#include "infer/core/error.h"
#include "infer/tokenizer/jinja/builtins.h"
#include "infer/tokenizer/jinja/lexer.h"

namespace infer::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  NodeList ParseTemplate() {
    NodeList nodes = ParseBody({});
    if (Current().kind != TokenKind::kEnd)
      Error(fmt::format("unexpected '{{% {} %}}'", Current().text));
    return nodes;
  }

 private:
  const Token& Current() const { return tokens_[index_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  Token Next() { return tokens_[index_++]; }
  [[noreturn]] void Error(const std::string& what) const {
    Fail("chat template line {}: {}", Current().line, what);
  }
  bool IsOperator(const char* op) const {
    return Current().kind == TokenKind::kOperator && Current().text == op;
  }
  bool IsName(const char* name) const {
    return Current().kind == TokenKind::kName && Current().text == name;
  }
  void ExpectOperator(const char* op) {
    if (!IsOperator(op)) Error(fmt::format("expected '{}'", op));
    ++index_;
  }
  void ExpectName(const char* name) {
    if (!IsName(name)) Error(fmt::format("expected '{}'", name));
    ++index_;
  }
  std::string ExpectIdentifier() {
    if (Current().kind != TokenKind::kName) Error("expected a name");
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Current().kind != TokenKind::kBlockEnd) Error("expected end of tag '%}'");
    ++index_;
  }

  // Parses nodes until a block tag whose keyword is in `end_keywords` (left unconsumed: the
  // current token is then that keyword's name).
  NodeList ParseBody(const std::set<std::string>& end_keywords) {
    const DepthGuard guard(this);
    NodeList nodes;
    while (true) {
      const Token& token = Current();
      if (token.kind == TokenKind::kEnd) {
        if (!end_keywords.empty())
          Error("unexpected end of template, expected " + *end_keywords.begin());
        return nodes;
      }
      if (token.kind == TokenKind::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->text = Next().text;
        nodes.push_back(std::move(node));
      } else if (token.kind == TokenKind::kVarBegin) {
        ++index_;
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = Current().line;
        node->expr = ParseTuple();
        if (Current().kind != TokenKind::kVarEnd) Error("expected '}}'");
        ++index_;
        nodes.push_back(std::move(node));
      } else if (token.kind == TokenKind::kBlockBegin) {
        const Token& keyword = Peek();
        if (keyword.kind == TokenKind::kName && end_keywords.count(keyword.text)) {
          ++index_;
          return nodes;
        }
        ++index_;
        nodes.push_back(ParseStatement());
      } else {
        Error("unexpected token");
      }
    }
  }

  std::unique_ptr<Node> ParseStatement() {
    auto node = std::make_unique<Node>();
    node->line = Current().line;
    const std::string keyword = ExpectIdentifier();
    if (keyword == "if") {
      node->kind = Node::Kind::kIf;
      node->conditions.push_back(ParseTuple());
      ExpectBlockEnd();
      while (true) {
        node->bodies.push_back(ParseBody({"elif", "else", "endif"}));
        const std::string end = ExpectIdentifier();
        if (end == "elif") {
          node->conditions.push_back(ParseTuple());
          ExpectBlockEnd();
        } else if (end == "else") {
          ExpectBlockEnd();
          node->bodies.push_back(ParseBody({"endif"}));
          ExpectName("endif");
          ExpectBlockEnd();
          break;
        } else {
          ExpectBlockEnd();
          break;
        }
      }
    } else if (keyword == "for") {
      node->kind = Node::Kind::kFor;
      node->targets = ParseTargets();
      ExpectName("in");
      node->expr = ParseTuple(/*allow_condition=*/false);
      if (IsName("if")) {
        ++index_;
        node->condition = ParseExpression();
      }
      if (IsName("recursive")) Error("recursive loops are not supported");
      ExpectBlockEnd();
      node->bodies.push_back(ParseBody({"else", "endfor"}));
      if (ExpectIdentifier() == "else") {
        ExpectBlockEnd();
        node->bodies.push_back(ParseBody({"endfor"}));
        ExpectName("endfor");
      }
      ExpectBlockEnd();
    } else if (keyword == "set") {
      node->kind = Node::Kind::kSet;
      if (Current().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
          Peek().text == ".") {
        node->targets.push_back(Next().text);
        ++index_;
        node->attribute = ExpectIdentifier();
      } else {
        node->targets = ParseTargets();
      }
      if (IsOperator("=")) {
        ++index_;
        node->expr = ParseTuple();
        ExpectBlockEnd();
      } else {
        if (node->targets.size() != 1 || !node->attribute.empty())
          Error("block set takes one name");
        if (IsOperator("|")) Error("filtered block set is not supported");
        ExpectBlockEnd();
        node->bodies.push_back(ParseBody({"endset"}));
        ExpectName("endset");
        ExpectBlockEnd();
      }
    } else if (keyword == "macro") {
      node->kind = Node::Kind::kMacro;
      node->text = ExpectIdentifier();
      ExpectOperator("(");
      while (!IsOperator(")")) {
        Argument param;
        param.name = ExpectIdentifier();
        if (IsOperator("=")) {
          ++index_;
          param.value = ParseExpression();
        }
        node->params.push_back(std::move(param));
        if (!IsOperator(")")) ExpectOperator(",");
      }
      ++index_;
      ExpectBlockEnd();
      node->bodies.push_back(ParseBody({"endmacro"}));
      ExpectName("endmacro");
      ExpectBlockEnd();
    } else if (keyword == "break" || keyword == "continue") {
      node->kind = keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectBlockEnd();
    } else if (keyword == "generation") {
      node->kind = Node::Kind::kBlock;
      ExpectBlockEnd();
      node->bodies.push_back(ParseBody({"endgeneration"}));
      ExpectName("endgeneration");
      ExpectBlockEnd();
    } else {
      index_ -= 1;
      Error(fmt::format("'{{% {} %}}' is not supported", keyword));
    }
    return node;
  }

  std::vector<std::string> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = IsOperator("(");
    if (parenthesized) ++index_;
    targets.push_back(ExpectIdentifier());
    while (IsOperator(",")) {
      ++index_;
      if (Current().kind != TokenKind::kName) break;
      targets.push_back(ExpectIdentifier());
    }
    if (parenthesized) ExpectOperator(")");
    return targets;
  }

  ExprPtr MakeExpr(Expr::Kind kind) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = Current().line;
    return expr;
  }

  // expression (',' expression)* -> a tuple when there is a comma.
  ExprPtr ParseTuple(bool allow_condition = true) {
    ExprPtr first = ParseExpression(allow_condition);
    if (!IsOperator(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple);
    tuple->items.push_back(std::move(first));
    while (IsOperator(",")) {
      ++index_;
      if (Current().kind == TokenKind::kVarEnd || Current().kind == TokenKind::kBlockEnd ||
          IsOperator(")") || IsOperator("="))
        break;
      tuple->items.push_back(ParseExpression(allow_condition));
    }
    return tuple;
  }

  ExprPtr ParseExpression(bool allow_condition = true) {
    const DepthGuard guard(this);
    ExprPtr expr = ParseOr();
    if (!allow_condition) return expr;
    while (IsName("if")) {
      ++index_;
      auto condition = MakeExpr(Expr::Kind::kCondition);
      condition->items.push_back(ParseOr());
      condition->items.push_back(std::move(expr));
      if (IsName("else")) {
        ++index_;
        condition->items.push_back(ParseExpression());
      } else {
        condition->items.push_back(nullptr);
      }
      expr = std::move(condition);
    }
    return expr;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto expr = MakeExpr(Expr::Kind::kBinary);
    expr->name = op;
    expr->items.push_back(std::move(left));
    expr->items.push_back(std::move(right));
    return expr;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      ++index_;
      left = Binary("or", std::move(left), ParseAnd());
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      ++index_;
      left = Binary("and", std::move(left), ParseNot());
    }
    return left;
  }

  ExprPtr ParseNot() {
    const DepthGuard guard(this);
    if (IsName("not")) {
      ++index_;
      auto expr = MakeExpr(Expr::Kind::kUnary);
      expr->name = "not";
      expr->items.push_back(ParseNot());
      return expr;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    ExprPtr first = ParseMath1();
    ExprPtr compare;
    while (true) {
      std::string op;
      if (Current().kind == TokenKind::kOperator &&
          (Current().text == "==" || Current().text == "!=" || Current().text == "<" ||
           Current().text == "<=" || Current().text == ">" || Current().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++index_;
        op = "in";
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        index_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!compare) {
        compare = MakeExpr(Expr::Kind::kCompare);
        compare->items.push_back(std::move(first));
      }
      compare->ops.push_back(op);
      compare->items.push_back(ParseMath1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOperator("+") || IsOperator("-")) {
      const std::string op = Next().text;
      left = Binary(op, std::move(left), ParseConcat());
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOperator("~")) {
      ++index_;
      left = Binary("~", std::move(left), ParseMath2());
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOperator("*") || IsOperator("/") || IsOperator("//") || IsOperator("%")) {
      const std::string op = Next().text;
      left = Binary(op, std::move(left), ParsePow());
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOperator("**")) {
      ++index_;
      left = Binary("**", std::move(left), ParseUnary(true));
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    const DepthGuard guard(this);
    ExprPtr expr;
    if (IsOperator("-") || IsOperator("+")) {
      expr = MakeExpr(Expr::Kind::kUnary);
      expr->name = Next().text;
      expr->items.push_back(ParseUnary(false));
    } else {
      expr = ParsePrimary();
    }
    expr = ParsePostfix(std::move(expr));
    if (with_filter) expr = ParseFilterExpr(std::move(expr));
    return expr;
  }

  ExprPtr ParsePrimary() {
    const Token& token = Current();
    if (token.kind == TokenKind::kName) {
      const std::string name = Next().text;
      auto expr = MakeExpr(Expr::Kind::kLiteral);
      if (name == "true" || name == "True")
        expr->value = Value(true);
      else if (name == "false" || name == "False")
        expr->value = Value(false);
      else if (name == "none" || name == "None")
        expr->value = Value(None{});
      else {
        expr->kind = Expr::Kind::kName;
        expr->name = name;
      }
      return expr;
    }
    if (token.kind == TokenKind::kString) {
      std::string text;
      while (Current().kind == TokenKind::kString) text += Next().text;
      auto expr = MakeExpr(Expr::Kind::kLiteral);
      expr->value = Value(std::move(text));
      return expr;
    }
    if (token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat) {
      auto expr = MakeExpr(Expr::Kind::kLiteral);
      const Token number = Next();
      try {
        expr->value = number.kind == TokenKind::kInteger ? Value(int64_t{std::stoll(number.text)})
                                                         : Value(std::stod(number.text));
      } catch (const std::exception&) {
        Error(fmt::format("number out of range: {}", number.text));
      }
      return expr;
    }
    if (IsOperator("(")) {
      ++index_;
      if (IsOperator(")")) {
        ++index_;
        return MakeExpr(Expr::Kind::kTuple);
      }
      ExprPtr inner = ParseTuple();
      ExpectOperator(")");
      return inner;
    }
    if (IsOperator("[")) {
      ++index_;
      auto list = MakeExpr(Expr::Kind::kList);
      while (!IsOperator("]")) {
        list->items.push_back(ParseExpression());
        if (!IsOperator("]")) ExpectOperator(",");
      }
      ++index_;
      return list;
    }
    if (IsOperator("{")) {
      ++index_;
      auto dict = MakeExpr(Expr::Kind::kDict);
      while (!IsOperator("}")) {
        dict->items.push_back(ParseExpression());
        ExpectOperator(":");
        dict->items.push_back(ParseExpression());
        if (!IsOperator("}")) ExpectOperator(",");
      }
      ++index_;
      return dict;
    }
    Error(token.text.empty() ? std::string("expected an expression")
                             : fmt::format("unexpected '{}'", token.text));
  }

  ExprPtr ParsePostfix(ExprPtr expr) {
    while (true) {
      if (IsOperator(".")) {
        ++index_;
        if (Current().kind == TokenKind::kInteger) {
          auto item = MakeExpr(Expr::Kind::kGetItem);
          auto index = MakeExpr(Expr::Kind::kLiteral);
          const Token number = Next();
          try {
            index->value = Value(int64_t{std::stoll(number.text)});
          } catch (const std::exception&) {
            Error(fmt::format("number out of range: {}", number.text));
          }
          item->items.push_back(std::move(expr));
          item->items.push_back(std::move(index));
          expr = std::move(item);
        } else {
          auto attr = MakeExpr(Expr::Kind::kGetAttr);
          attr->name = ExpectIdentifier();
          attr->items.push_back(std::move(expr));
          expr = std::move(attr);
        }
      } else if (IsOperator("[")) {
        ++index_;
        expr = ParseSubscript(std::move(expr));
      } else if (IsOperator("(")) {
        expr = ParseCall(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr object) {
    ExprPtr parts[3];
    bool is_slice = false;
    if (!IsOperator(":")) parts[0] = ParseExpression();
    if (IsOperator(":")) {
      is_slice = true;
      ++index_;
      if (!IsOperator("]") && !IsOperator(":")) parts[1] = ParseExpression();
      if (IsOperator(":")) {
        ++index_;
        if (!IsOperator("]")) parts[2] = ParseExpression();
      }
    }
    if (IsOperator(",")) Error("tuple subscripts are not supported");
    ExpectOperator("]");
    auto expr = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem);
    expr->items.push_back(std::move(object));
    if (is_slice) {
      for (auto& part : parts) expr->items.push_back(std::move(part));
    } else {
      expr->items.push_back(std::move(parts[0]));
    }
    return expr;
  }

  std::vector<Argument> ParseArguments() {
    ExpectOperator("(");
    std::vector<Argument> args;
    while (!IsOperator(")")) {
      if (IsOperator("*") || IsOperator("**")) Error("*args / **kwargs are not supported");
      Argument arg;
      if (Current().kind == TokenKind::kName && Peek().kind == TokenKind::kOperator &&
          Peek().text == "=") {
        arg.name = Next().text;
        ++index_;
      } else if (!args.empty() && !args.back().name.empty()) {
        Error("positional argument after keyword argument");
      }
      arg.value = ParseExpression();
      args.push_back(std::move(arg));
      if (!IsOperator(")")) ExpectOperator(",");
    }
    ++index_;
    return args;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto call = MakeExpr(Expr::Kind::kCall);
    call->args = ParseArguments();
    call->items.push_back(std::move(callee));
    return call;
  }

  ExprPtr ParseFilterExpr(ExprPtr expr) {
    while (true) {
      if (IsOperator("|")) {
        ++index_;
        auto filter = MakeExpr(Expr::Kind::kFilter);
        filter->name = ExpectIdentifier();
        while (IsOperator(".")) {
          ++index_;
          filter->name.push_back('.');
          filter->name.append(ExpectIdentifier());
        }
        if (!Builtins::HasFilter(filter->name))
          Error(fmt::format("filter '{}' is not supported", filter->name));
        if (IsOperator("(")) filter->args = ParseArguments();
        filter->items.push_back(std::move(expr));
        expr = std::move(filter);
      } else if (IsName("is")) {
        ++index_;
        auto test = MakeExpr(Expr::Kind::kTest);
        if (IsName("not")) {
          ++index_;
          test->negated = true;
        }
        if (Current().kind == TokenKind::kName) {
          test->name = Next().text;
        } else if (Current().kind == TokenKind::kOperator) {
          test->name = Next().text;
        } else {
          Error("expected a test name after 'is'");
        }
        if (!Builtins::HasTest(test->name))
          Error(fmt::format("test '{}' is not supported", test->name));
        if (IsOperator("(")) {
          test->args = ParseArguments();
        } else if ((Current().kind == TokenKind::kName || Current().kind == TokenKind::kString ||
                    Current().kind == TokenKind::kInteger || Current().kind == TokenKind::kFloat ||
                    IsOperator("[") || IsOperator("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if")) {
          Argument arg;
          arg.value = ParsePostfix(ParsePrimary());
          test->args.push_back(std::move(arg));
        }
        test->items.push_back(std::move(expr));
        expr = std::move(test);
      } else if (IsOperator("(")) {
        expr = ParseCall(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int depth_ = 0;

  // Nesting limit, so hostile templates cannot overflow the stack of this recursive parser.
  static constexpr int kMaxDepth = 200;
  struct DepthGuard {
    explicit DepthGuard(Parser* parser) : parser_(parser) {
      if (++parser_->depth_ > kMaxDepth) parser_->Error("template nests too deeply");
    }
    ~DepthGuard() { --parser_->depth_; }
    Parser* parser_;
  };
};

}  // namespace

NodeList Parse(std::string_view source) { return Parser(Lex(source)).ParseTemplate(); }

}  // namespace infer::jinja
