// The JSON Schema compiler's strings (lengths, patterns, formats) and numbers (integer and decimal
// ranges from exact bounds).
#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/json_schema_compiler.h"
#include "infer/grammar/regex_to_gbnf.h"

namespace infer::schema {

std::string SchemaCompiler::Format(const std::string& format, const std::string& pointer,
                                   size_t& min_len, size_t& max_len) {
  if (format == "date" || format == "date-time") {
    // Exact calendar: days per month, 29 February in leap years only, years 0001-9999.
    const std::string mult4 = "(\"0\" [48] | [2468] [048] | [13579] [26])";
    const std::string year = rules_.Add(
        "year",
        "\"000\" [1-9] | \"00\" [1-9] [0-9] | \"0\" [1-9] [0-9] [0-9] | [1-9] [0-9] [0-9] [0-9]");
    const std::string leap =
        rules_.Add("leap-year", fmt::format("[0-9] [0-9] {0} | {0} \"00\"", mult4));
    std::string date = rules_.Add(
        "date",
        year +
            " \"-\" (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
            "[01]) | " +
            year + " \"-\" (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | " +
            year + " \"-02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) | " + leap + " \"-02-29\"");
    if (format == "date") {
      min_len = max_len = 10;
      return date;
    }
    min_len = 20;
    max_len = 35;
    return rules_.Add("date-time", date + " \"T\" " + Time());
  }
  if (format == "time") {
    min_len = 9;
    max_len = 24;
    return Time();
  }
  if (format == "uuid") {
    min_len = max_len = 36;
    const std::string hex = rules_.Add("hex", "[0-9a-fA-F]");
    return rules_.Add(
        "uuid",
        fmt::format("{0}{{8}} \"-\" {0}{{4}} \"-\" {0}{{4}} \"-\" {0}{{4}} \"-\" {0}{{12}}", hex));
  }
  if (format == "email") {
    // A strict subset of what email validators and the patterns clients send with this
    // format accept (zod's, HTML's): dot-separated atoms without a leading, trailing or double
    // dot, an '@', labels that start with a letter or digit, and a top-level domain of 2-6
    // letters. Sized to `max_len` when the schema bounds the length (as .email().max(n)).
    const size_t budget = max_len == 0 ? 108 : max_len;
    if (budget < 8) {
      Refuse(Child(pointer, "maxLength"), "an email of at most 7 characters cannot be written");
    }
    min_len = 6;
    if (budget >= 108) {
      max_len = 108;
      return rules_.Add("email",
                        "[a-zA-Z0-9_+\\x2D]{1,16} (\".\" [a-zA-Z0-9_+\\x2D]{1,16}){0,2} \"@\" "
                        "([a-zA-Z0-9] [a-zA-Z0-9\\x2D]{0,14} \".\"){1,3} [a-zA-Z]{2,6}");
    }
    // local@label.tld within the budget: tld 2-3 letters, the rest shared.
    const size_t rest = budget - 5;  // '@', '.', a 3-letter tld
    const size_t local = std::max<size_t>(1, rest / 2);
    const size_t label = rest - local;  // >= 1
    max_len = local + 1 + label + 1 + 3;
    return rules_.Add("email", fmt::format("[a-zA-Z0-9_+\\x2D]{{1,{}}} \"@\" [a-zA-Z0-9] "
                                           "[a-zA-Z0-9\\x2D]{{0,{}}} \".\" [a-zA-Z]{{2,3}}",
                                           local, label - 1));
  }
  Refuse(Child(pointer, "format"), fmt::format("the format '{}' is not supported", format));
}

std::string SchemaCompiler::Time() {
  return rules_.Add(
      "time",
      "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
      "(\"Z\" | [+\\x2D] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])");
}

std::string SchemaCompiler::CompileString(const Json& schema, const std::string& pointer) {
  const size_t min = Count(schema, "minLength", pointer);
  const std::optional<size_t> max = MaxCount(schema, "maxLength", pointer);
  if (max && *max < min) Refuse(Child(pointer, "maxLength"), "maxLength is below minLength");
  const std::string quote = "\"\\\"\"";
  // A pattern beside a format (zod writes both for .email()): the pattern when it compiles
  // and implies the length bounds (every validator checks it); else the format, whose
  // grammars are strict subsets of what such patterns describe (zod 3's email pattern needs
  // lookaheads, which a grammar lacks; zod 4's has no length bound for .max(n)).
  bool use_format = schema.contains("format");
  if (use_format && schema.contains("pattern")) {
    try {
      grammar::GbnfRules scratch(options_.max_grammar_bytes);
      grammar::RegexOptions probe;
      probe.search = true;
      probe.json_string = true;
      const grammar::CompiledRegex compiled = grammar::CompileRegex(
          schema["pattern"].is_string() ? schema["pattern"].get<std::string>() : "(", probe,
          scratch);
      use_format = min > compiled.min_length ||
                   (max && (!compiled.max_length || *compiled.max_length > *max));
    } catch (const GrammarError&) {
    }
  }
  if (const auto it = schema.find("format"); use_format && it != schema.end()) {
    if (!it->is_string()) Refuse(Child(pointer, "format"), "must be a string");
    size_t fmin = 0;
    size_t fmax = max.value_or(0);  // in: the schema's bound (formats that can fit it do)
    const std::string body = Format(it->get<std::string>(), pointer, fmin, fmax);
    if (min > fmin || (max && *max < fmax)) {
      Refuse(Child(pointer, schema.contains("maxLength") ? "maxLength" : "minLength"),
             "minLength/maxLength together with a format they would cut is not supported");
    }
    return quote + " " + body + " " + quote;
  }
  if (const auto it = schema.find("pattern"); it != schema.end()) {
    if (!it->is_string()) Refuse(Child(pointer, "pattern"), "must be a string");
    grammar::RegexOptions regex_options;
    regex_options.search = true;
    regex_options.json_string = true;
    grammar::CompiledRegex compiled;
    try {
      compiled = grammar::CompileRegex(it->get<std::string>(), regex_options, rules_);
    } catch (const GrammarError& e) {
      throw GrammarError(fmt::format("JSON schema {}: {}", Child(pointer, "pattern"), e.what()));
    }
    if (min > compiled.min_length ||
        (max && (!compiled.max_length || *compiled.max_length > *max))) {
      Refuse(Child(pointer, schema.contains("maxLength") ? "maxLength" : "minLength"),
             "minLength/maxLength together with a pattern that does not imply them is not "
             "supported (anchor the pattern and bound its repetitions instead)");
    }
    return quote + " " + rules_.Add("pattern", compiled.expression) + " " + quote;
  }
  if (min == 0 && !max) return AnyString();
  return quote + " " + Repeat(StringChar(), min, max) + " " + quote;
}

std::optional<Bound> SchemaCompiler::ReadBound(const Json& schema, const std::string& pointer,
                                               bool lower) {
  const char* inclusive_key = lower ? "minimum" : "maximum";
  const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
  std::optional<Bound> bound;
  auto tighten = [&](const Bound& b) {
    if (!bound) {
      bound = b;
      return;
    }
    const int c = Compare(b.value, bound->value);
    if ((lower && c > 0) || (!lower && c < 0) || (c == 0 && b.exclusive)) bound = b;
  };
  bool draft4_exclusive = false;
  if (const auto it = schema.find(exclusive_key); it != schema.end()) {
    if (it->is_boolean()) {
      draft4_exclusive = it->get<bool>();
    } else {
      tighten({DecimalFromJson(*it, Child(pointer, exclusive_key)), true});
    }
  }
  if (const auto it = schema.find(inclusive_key); it != schema.end()) {
    tighten({DecimalFromJson(*it, Child(pointer, inclusive_key)), draft4_exclusive});
  }
  return bound;
}

std::string SchemaCompiler::CompileNumber(const Json& schema, const std::string& pointer,
                                          bool integer) {
  const std::optional<Bound> lo = ReadBound(schema, pointer, true);
  const std::optional<Bound> hi = ReadBound(schema, pointer, false);
  const std::string where =
      Child(pointer, schema.contains("maximum") ? "maximum" : "exclusiveMaximum");
  if (integer) {
    if (!lo && !hi) {
      return rules_.Add("integer",
                        fmt::format("\"-\"? (\"0\" | [1-9] {})",
                                    Repeat("[0-9]", 0, options_.max_integer_digits - 1)));
    }
    std::optional<Int> low;
    std::optional<Int> high;
    if (lo) low = lo->exclusive ? IntAdd1(Floor(lo->value)) : Ceil(lo->value);
    if (hi) high = hi->exclusive ? IntSub1(Ceil(hi->value)) : Floor(hi->value);
    if (low && high && IntLess(*high, *low)) Refuse(where, "no integer lies within the bounds");
    return rules_.Add("integer", IntegerRange(low, high));
  }
  if (!lo && !hi) return AnyNumber();
  if (lo && hi) {
    const int c = Compare(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) {
      Refuse(where, "no number lies within the bounds");
    }
  }
  std::vector<std::string> parts;
  // x < 0, written as '-' and its magnitude.
  if (!lo || lo->value.negative) {
    Bound mlo{Decimal{}, true};  // magnitude > 0
    if (hi && hi->value.negative)
      mlo = {Decimal{false, hi->value.whole, hi->value.frac}, hi->exclusive};
    std::optional<Bound> mhi;
    if (lo) mhi = Bound{Decimal{false, lo->value.whole, lo->value.frac}, lo->exclusive};
    if (auto m = MagnitudeRange(mlo, mhi, lo ? &lo->value : nullptr, hi ? &hi->value : nullptr)) {
      parts.push_back("\"-\" " + *m);
    }
  }
  // x >= 0.
  if (!hi || !hi->value.negative) {
    Bound nlo{Decimal{}, false};
    if (lo && !lo->value.negative) nlo = *lo;
    if (auto m = MagnitudeRange(nlo, hi, lo ? &lo->value : nullptr, hi ? &hi->value : nullptr)) {
      parts.push_back(*m);
    }
  }
  if (parts.empty()) Refuse(where, "no number lies within the bounds");
  std::string body;
  for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
  return rules_.Add("number", body);
}

size_t SchemaCompiler::CapDigits(const Decimal* a, const Decimal* b) const {
  size_t digits = options_.max_integer_digits;
  for (const Decimal* d : {a, b}) {
    if (d != nullptr) digits = std::max(digits, d->whole.size());
  }
  return digits;
}

std::string SchemaCompiler::IntegerRange(const std::optional<Int>& low,
                                         const std::optional<Int>& high) {
  const size_t cap_digits = std::max(
      {options_.max_integer_digits, low ? low->digits.size() : 0, high ? high->digits.size() : 0});
  const std::string cap(cap_digits, '9');
  std::vector<std::string> parts;
  // Negative part: magnitudes in [m_lo, m_hi].
  if (!low || low->negative) {
    const std::string m_hi = low ? low->digits : cap;
    const std::string m_lo = (high && high->negative) ? high->digits : "1";
    if (!LessDigits(m_hi, m_lo)) parts.push_back("\"-\" " + UnsignedRange(m_lo, m_hi));
  }
  if (!high || !high->negative) {
    const std::string n_lo = (low && !low->negative) ? low->digits : "0";
    const std::string n_hi = high ? high->digits : cap;
    if (!LessDigits(n_hi, n_lo)) parts.push_back(UnsignedRange(n_lo, n_hi));
  }
  std::string body;
  for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
  return body;
}

std::optional<std::string> SchemaCompiler::FracDigits(size_t i, const std::string& low,
                                                      FracMode low_mode, bool low_tight,
                                                      const std::string& high, FracMode high_mode,
                                                      bool high_tight, bool need_digit) {
  const size_t budget = options_.max_fraction_digits;
  if (low_tight && i >= low.size() && low_mode == FracMode::kInclusive) low_tight = false;
  if (!low_tight && !high_tight) {
    if (i >= budget) return need_digit ? std::nullopt : std::optional<std::string>("\"\"");
    return Repeat("[0-9]", need_digit ? 1 : 0, budget - i);
  }
  if (!low_tight && high_tight && i >= high.size() && high_mode == FracMode::kInclusive) {
    // Equal to the upper bound so far, which has no digits left: only zeros may follow.
    if (i >= budget) return need_digit ? std::nullopt : std::optional<std::string>("\"\"");
    return Repeat("\"0\"", need_digit ? 1 : 0, budget - i);
  }
  bool can_stop = !need_digit;
  if (low_tight) can_stop = false;  // equal so far to a bound with digits left, or exclusive
  if (high_tight && high_mode == FracMode::kExclusive && i >= high.size()) can_stop = false;
  std::vector<std::string> parts;
  if (can_stop) parts.emplace_back("\"\"");
  if (i < budget) {
    const char low_digit = low_tight ? (i < low.size() ? low[i] : '0') : '0';
    const char high_digit = high_tight ? (i < high.size() ? high[i] : '0') : '9';
    for (char d = low_digit; d <= high_digit;) {
      const bool tight_lo = low_tight && d == low_digit;
      const bool tight_hi = high_tight && d == high_digit;
      char end = d;
      if (!tight_lo && !tight_hi) {
        end = high_tight ? static_cast<char>(high_digit - 1) : high_digit;
      }
      const auto rest = FracDigits(i + 1, low, low_mode, tight_lo, high, high_mode, tight_hi,
                                   /*need_digit=*/false);
      if (rest) {
        const std::string digit = DigitClass(d, end);
        parts.push_back(*rest == "\"\"" ? digit : digit + " " + *rest);
      }
      d = static_cast<char>(end + 1);
    }
  }
  if (parts.empty()) return std::nullopt;
  return Alternatives(parts);
}

std::optional<std::string> SchemaCompiler::Fraction(const std::string& low, FracMode low_mode,
                                                    const std::string& high, FracMode high_mode) {
  std::vector<std::string> parts;
  const bool low_tight = low_mode != FracMode::kNone;
  const bool high_tight = high_mode != FracMode::kNone;
  // No fraction: the value is the integer part itself.
  bool whole_ok = true;
  if (low_tight && (!low.empty() || low_mode == FracMode::kExclusive)) whole_ok = false;
  if (high_tight && high.empty() && high_mode == FracMode::kExclusive) whole_ok = false;
  if (auto digits = FracDigits(0, low, low_mode, low_tight, high, high_mode, high_tight, true)) {
    parts.push_back("\".\" " + *digits);
  }
  if (parts.empty() && !whole_ok) return std::nullopt;
  if (parts.empty()) return std::string("\"\"");
  return whole_ok ? Group(parts[0], "?") : parts[0];
}

std::optional<std::string> SchemaCompiler::MagnitudeRange(const Bound& low,
                                                          const std::optional<Bound>& high,
                                                          const Decimal* a, const Decimal* b) {
  if (high) {
    const int c = CompareMagnitude(low.value, high->value);
    if (c > 0 || (c == 0 && (low.exclusive || high->exclusive))) return std::nullopt;
  }
  const FracMode low_mode = low.exclusive ? FracMode::kExclusive : FracMode::kInclusive;
  const std::string free_fraction =
      "(\".\" " + Repeat("[0-9]", 1, options_.max_fraction_digits) + ")?";
  const std::string& low_whole = low.value.whole;
  std::vector<std::string> parts;
  if (high && high->value.whole == low_whole) {
    const FracMode high_mode = high->exclusive ? FracMode::kExclusive : FracMode::kInclusive;
    if (auto f = Fraction(low.value.frac, low_mode, high->value.frac, high_mode)) {
      parts.push_back(GbnfLiteral(low_whole) + " " + *f);
    }
  } else {
    const std::string high_whole = high ? high->value.whole : std::string(CapDigits(a, b), '9');
    if (auto f = Fraction(low.value.frac, low_mode, "", FracMode::kNone)) {
      parts.push_back(GbnfLiteral(low_whole) + " " + *f);
    }
    const std::string next = Increment(low_whole);
    const std::string last = high ? DecrementPositive(high_whole) : high_whole;
    if (!LessDigits(last, next)) parts.push_back(UnsignedRange(next, last) + " " + free_fraction);
    if (high) {
      const FracMode high_mode = high->exclusive ? FracMode::kExclusive : FracMode::kInclusive;
      if (auto f = Fraction("", FracMode::kNone, high->value.frac, high_mode)) {
        parts.push_back(GbnfLiteral(high_whole) + " " + *f);
      }
    }
  }
  if (parts.empty()) return std::nullopt;
  return Alternatives(parts);
}

}  // namespace infer::schema
