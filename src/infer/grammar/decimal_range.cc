#include "infer/grammar/decimal_range.h"

#include <vector>

#include "infer/grammar/gbnf_emit.h"

namespace infer::grammar {

Decimal MakeDecimal(bool negative, std::string whole, std::string frac) {
  const size_t first = whole.find_first_not_of('0');
  whole = first == std::string::npos ? "0" : whole.substr(first);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  Decimal d{negative, whole, frac};
  if (d.IsZero()) d.negative = false;
  return d;
}

Decimal DecimalFromText(std::string_view text) {
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  std::string digits;
  long point = -1;
  long exponent = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      point = static_cast<long>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (point < 0) point = static_cast<long>(digits.size());
  if (i < text.size()) exponent = std::stol(std::string(text.substr(i + 1)));
  point += exponent;
  if (point <= 0) return MakeDecimal(negative, "0", std::string(-point, '0') + digits);
  if (point >= static_cast<long>(digits.size())) {
    return MakeDecimal(negative, digits + std::string(point - digits.size(), '0'), "");
  }
  return MakeDecimal(negative, digits.substr(0, point), digits.substr(point));
}

int CompareMagnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (const int c = a.whole.compare(b.whole); c != 0) return c < 0 ? -1 : 1;
  const int c = a.frac.compare(b.frac);  // no trailing zeros: plain string order is numeric
  return c == 0 ? 0 : (c < 0 ? -1 : 1);
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = CompareMagnitude(a, b);
  return a.negative ? -c : c;
}

std::string Increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string DecrementPositive(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  const size_t first = s.find_first_not_of('0');
  return first == std::string::npos ? "0" : s.substr(first);
}

bool LessDigits(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

Int IntAdd1(const Int& v) {
  if (!v.negative) return {false, Increment(v.digits)};
  const std::string m = DecrementPositive(v.digits);
  return {m != "0", m};
}

Int IntSub1(const Int& v) {
  if (v.negative) return {true, Increment(v.digits)};
  if (v.digits == "0") return {true, "1"};
  return {false, DecrementPositive(v.digits)};
}

Int Floor(const Decimal& d) {
  if (d.frac.empty()) return {d.negative, d.whole};
  if (d.negative) return {true, Increment(d.whole)};
  return {false, d.whole};
}

Int Ceil(const Decimal& d) {
  if (d.frac.empty()) return {d.negative, d.whole};
  if (d.negative) return {d.whole != "0", d.whole};
  return {false, Increment(d.whole)};
}

bool IntLess(const Int& a, const Int& b) {
  if (a.negative != b.negative) return a.negative;
  return a.negative ? LessDigits(b.digits, a.digits) : LessDigits(a.digits, b.digits);
}

std::string SameLengthRange(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  if (a == b) return GbnfLiteral(a);
  const size_t rest = a.size() - 1;
  if (a[0] == b[0]) {
    return GbnfLiteral(a.substr(0, 1)) + " " + SameLengthRange(a.substr(1), b.substr(1));
  }
  const bool low_full = a.find_first_not_of('0', 1) == std::string::npos;
  const bool high_full = b.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> parts;
  if (!low_full) {
    parts.push_back(GbnfLiteral(a.substr(0, 1)) + " " +
                    SameLengthRange(a.substr(1), std::string(rest, '9')));
  }
  const char first = low_full ? a[0] : static_cast<char>(a[0] + 1);
  const char last = high_full ? b[0] : static_cast<char>(b[0] - 1);
  if (first <= last) {
    parts.push_back(Seq({DigitClass(first, last), rest > 0 ? Repeat("[0-9]", rest, rest) : ""}));
  }
  if (!high_full) {
    parts.push_back(GbnfLiteral(b.substr(0, 1)) + " " +
                    SameLengthRange(std::string(rest, '0'), b.substr(1)));
  }
  return Alternatives(parts);
}

std::string UnsignedRange(const std::string& a, const std::string& b) {
  if (a.size() == b.size()) return SameLengthRange(a, b);
  std::vector<std::string> parts;
  parts.push_back(SameLengthRange(a, std::string(a.size(), '9')));
  if (b.size() > a.size() + 1) {
    parts.push_back("[1-9] " + Repeat("[0-9]", a.size(), b.size() - 2));
  }
  std::string power(b.size(), '0');
  power[0] = '1';
  parts.push_back(SameLengthRange(power, b));
  return Alternatives(parts);
}

}  // namespace infer::grammar
