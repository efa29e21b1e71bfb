// Exact decimal numbers and integer ranges, for the JSON Schema compiler's numeric bounds
// (minimum, maximum, exclusive ones): a decimal as its digit strings, the integers just inside
// a bound, and GBNF for the integers of a closed range. Digit strings, never doubles, so a
// bound like 0.1 or 1e300 is the number the client wrote.
#pragma once

#include <string>
#include <string_view>

namespace infer::grammar {

// |value| as digits: `whole` without leading zeros ("0" for zero), `frac` without trailing ones.
struct Decimal {
  bool negative = false;
  std::string whole = "0";
  std::string frac;

  bool IsZero() const { return whole == "0" && frac.empty(); }
};

// The decimal of a sign and digit strings, normalized (no leading or trailing zeros; no -0).
Decimal MakeDecimal(bool negative, std::string whole, std::string frac);
// The decimal a number's text (JSON's syntax, with an optional exponent) writes.
Decimal DecimalFromText(std::string_view text);
// -1, 0 or 1 as |a| is below, equal to or above |b|.
int CompareMagnitude(const Decimal& a, const Decimal& b);
// -1, 0 or 1 as a is below, equal to or above b.
int Compare(const Decimal& a, const Decimal& b);

// Digit strings of non-negative integers: s + 1, s - 1 (s > 0), and a < b.
std::string Increment(std::string s);
std::string DecrementPositive(std::string s);
bool LessDigits(const std::string& a, const std::string& b);

// An integer as (negative, magnitude digits).
struct Int {
  bool negative = false;
  std::string digits = "0";
};
Int IntAdd1(const Int& v);
Int IntSub1(const Int& v);
// The integers at or below / at or above d.
Int Floor(const Decimal& d);
Int Ceil(const Decimal& d);
bool IntLess(const Int& a, const Int& b);

// GBNF for the integers of exactly a.size() digits in [a, b] (a.size() == b.size(), a <= b).
std::string SameLengthRange(const std::string& a, const std::string& b);
// GBNF for the non-negative integers in [a, b], written without leading zeros.
std::string UnsignedRange(const std::string& a, const std::string& b);

// One end of a number range.
struct Bound {
  Decimal value;
  bool exclusive = false;
};

// How a fraction's digits meet a bound: no bound, at or past it allowed, only past it.
enum class FracMode { kNone, kInclusive, kExclusive };

}  // namespace infer::grammar
