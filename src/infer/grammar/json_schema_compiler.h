// The JSON Schema compiler's class, private to its files: json_schema.cc (the pass, keyword
// checks, $ref, allOf, the dispatch by type), json_schema_scalars.cc (strings, numbers) and
// json_schema_containers.cc (objects, arrays). json_schema.h is the interface.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/grammar/decimal_range.h"
#include "infer/grammar/gbnf_emit.h"
#include "infer/grammar/json_schema.h"

namespace infer::schema {

using grammar::Alternatives;
using grammar::Bound;
using grammar::Ceil;
using grammar::Compare;
using grammar::CompareMagnitude;
using grammar::Decimal;
using grammar::DecimalFromText;
using grammar::DecrementPositive;
using grammar::DigitClass;
using grammar::Floor;
using grammar::FracMode;
using grammar::GbnfLiteral;
using grammar::GbnfRules;
using grammar::Group;
using grammar::Increment;
using grammar::Int;
using grammar::IntAdd1;
using grammar::IntLess;
using grammar::IntSub1;
using grammar::LessDigits;
using grammar::MakeDecimal;
using grammar::Repeat;
using grammar::SameLengthRange;
using grammar::Seq;
using grammar::UnsignedRange;
using Json = nlohmann::ordered_json;

// The JSON pointer of `pointer`'s child `key` (RFC 6901's escapes), and a pointer as errors
// name it ("/" for the root).
std::string Child(const std::string& pointer, std::string_view key);
std::string Where(const std::string& pointer);
// Throws GrammarError: the schema at `pointer` is refused for `what`.
[[noreturn]] void Refuse(const std::string& pointer, std::string_view what);
// value's JSON text (GrammarError for invalid UTF-8).
std::string DumpJson(const Json& value);
// A JSON number as an exact decimal (Refuse for anything else).
Decimal DecimalFromJson(const Json& value, const std::string& pointer);

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), rules_(options.max_grammar_bytes) {}

  std::string Run() {
    const std::string body = Compile(root_, "", "root-value");
    const std::string ws = Ws();
    return rules_.Render(ws.empty() ? body : ws + " " + body + " " + ws, options_.start_rule);
  }

 private:
  // ---- Whitespace and punctuation. ----
  bool Flexible() const { return options_.whitespace == JsonSchemaOptions::Whitespace::kFlexible; }
  std::string Ws();
  std::string After();
  std::string Before() { return Flexible() && !Ws().empty() ? Ws() + " " : ""; }
  std::string Comma() { return Before() + "\",\"" + After(); }
  std::string Colon() { return Before() + "\":\"" + After(); }
  std::string Open(char c);
  std::string Close(char c) { return Before() + GbnfLiteral(std::string(1, c)); }

  // ---- Shared rules. ----
  std::string StringChar();
  std::string AnyString();
  std::string AnyNumber();
  std::string Scalar();
  // An object whose values are `value`.
  std::string AnyObjectOf(const std::string& value);
  // Any JSON value nested at most `depth` levels.
  std::string AnyValue(size_t depth);
  std::string AnyValue() { return AnyValue(options_.max_any_depth); }
  std::string AnyObject();

  // ---- Keyword checks. ----
  void CheckKeywords(const Json& schema, const std::string& pointer);
  static bool HasConstraints(const Json& schema);
  size_t Count(const Json& schema, const char* key, const std::string& pointer);
  std::optional<size_t> MaxCount(const Json& schema, const char* key, const std::string& pointer);

  // ---- $ref. ----
  // The schema a "#..." reference points to, and its JSON pointer.
  std::pair<const Json*, std::string> Resolve(const std::string& ref, const std::string& pointer);
  std::string RefRule(const std::string& ref, const std::string& pointer);

  // ---- allOf and siblings: merged into one schema. ----

  // `schema` with its $ref and allOf merged in, so none remain at its top.
  Json Flatten(const Json& schema, const std::string& pointer, size_t depth);

  // Both schemas must hold: the keywords of each, with those both have combined.
  static Json Merge(const Json& a, const Json& b, const std::string& pointer);

  // ---- The dispatch. ----
  std::string Compile(const Json& schema, const std::string& pointer, std::string_view hint);
  std::string CompileInner(const Json& schema, const std::string& pointer, std::string_view hint);
  std::string CompileAnyOf(const Json& schema, const std::string& pointer, std::string_view hint);
  static bool HasType(const Json& value, const std::string& type);
  std::string CompileEnum(const Json& schema, const std::string& pointer);
  std::string CompileTypes(const Json& schema, const std::string& pointer, std::string_view hint);

  // ---- Strings. ----
  std::string Format(const std::string& format, const std::string& pointer, size_t& min_len,
                     size_t& max_len);

  // RFC 3339 full-time, as JSON Schema's "time" (an offset is required).
  std::string Time();
  std::string CompileString(const Json& schema, const std::string& pointer);

  // ---- Numbers. ----
  std::optional<Bound> ReadBound(const Json& schema, const std::string& pointer, bool lower);
  std::string CompileNumber(const Json& schema, const std::string& pointer, bool integer);

  // The digit count of the unbounded side of a range: enough for the other bound.
  size_t CapDigits(const Decimal* a, const Decimal* b) const;
  std::string IntegerRange(const std::optional<Int>& low, const std::optional<Int>& high);

  // The fraction digits after position i of a number whose integer part equals the bounds'
  // (`low`/`high`: the bounds' fraction digits, tight while the digits so far equal them).
  std::optional<std::string> FracDigits(size_t i, const std::string& low, FracMode low_mode,
                                        bool low_tight, const std::string& high, FracMode high_mode,
                                        bool high_tight, bool need_digit);

  // The fraction part ("" or '.' and digits) of a number whose integer part equals the bounds'.
  std::optional<std::string> Fraction(const std::string& low, FracMode low_mode,
                                      const std::string& high, FracMode high_mode);

  // Magnitudes in [low, high] (high: none for unbounded), each written as digits with an
  // optional fraction and no exponent.
  std::optional<std::string> MagnitudeRange(const Bound& low, const std::optional<Bound>& high,
                                            const Decimal* a, const Decimal* b);

  // ---- Objects. ----
  struct Property {
    std::string name;
    std::string member;  // key, colon, value
    bool required = false;
  };

  // Keys of JSON strings that are none of `names` (raw characters only, no escapes, so no other
  // spelling of a declared name can slip through).
  std::string KeyExcept(const std::vector<std::string>& names);

  // Inside an object or array a token was written: a $ref back to an enclosing one recurses
  // properly from here on.
  class HeadGuard {
   public:
    explicit HeadGuard(std::set<std::string>& open) : open_(open), saved_(std::move(open)) {
      open_.clear();
    }
    ~HeadGuard() { open_ = std::move(saved_); }
    HeadGuard(const HeadGuard&) = delete;
    HeadGuard& operator=(const HeadGuard&) = delete;

   private:
    std::set<std::string>& open_;
    std::set<std::string> saved_;
  };
  std::string CompileObject(const Json& schema, const std::string& pointer, std::string_view hint);

  // ---- Arrays. ----
  std::string CompileArray(const Json& schema, const std::string& pointer, std::string_view hint);

  const Json& root_;
  const JsonSchemaOptions& options_;
  GbnfRules rules_;
  std::map<std::string, std::string> ref_rules_;  // target pointer -> rule
  std::set<std::string> head_open_;               // $refs being compiled, no token written yet
  size_t depth_ = 0;
};

}  // namespace infer::schema
