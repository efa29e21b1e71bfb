// Pre-tokenizers, following Hugging Face's split behaviours (Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous) and the `invert` flag exactly.
#include "infer/tokenizer/pre_tokenizer.h"

#include <utf8proc.h>

#include <functional>

#include "infer/core/error.h"
#include "infer/tokenizer/pcre_pattern.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior ParseBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  Fail("Split: behavior '{}' is not supported", name);
}

struct Span {
  size_t start, end;
  bool flag;  // is_match before behaviour; "remove" after
};

// Returns (start,end) of matches; the caller turns them into spans covering the text.
using MatchFinder = std::function<void(std::string_view, std::vector<std::pair<size_t, size_t>>&)>;

// HF's NormalizedString::split: the pieces of `piece` for `matches` under `behavior`.
void SplitPiece(const Piece& piece, const MatchFinder& find, SplitBehavior behavior, bool invert,
                std::vector<Piece>& out) {
  const std::string& text = piece.text;
  std::vector<std::pair<size_t, size_t>> matches;
  find(text, matches);
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t previous = 0;
  for (auto [start, end] : matches) {
    if (previous != start) spans.push_back({previous, start, false});
    spans.push_back({start, end, true});
    previous = end;
  }
  if (previous != text.size()) spans.push_back({previous, text.size(), false});
  if (invert)
    for (Span& span : spans) span.flag = !span.flag;

  std::vector<Span> splits;
  splits.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& span : spans) splits.push_back({span.start, span.end, false});
      break;
    case SplitBehavior::kRemoved:
      splits = spans;
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& span : spans) {
        if (span.flag == previous_match && !splits.empty()) {
          splits.back().end = span.end;
        } else {
          splits.push_back({span.start, span.end, false});
        }
        previous_match = span.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& span : spans) {
        if (span.flag && !previous_match && !splits.empty()) {
          splits.back().end = span.end;
        } else {
          splits.push_back({span.start, span.end, false});
        }
        previous_match = span.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !previous_match && !splits.empty()) {
          splits.back().start = it->start;
        } else {
          splits.push_back({it->start, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (const Span& split : splits) {
    if (split.flag || split.end == split.start) continue;
    out.push_back(Piece{text.substr(split.start, split.end - split.start),
                        piece.at_input_start && split.start == 0});
  }
}

void SplitAll(std::vector<Piece>& pieces, const MatchFinder& find, SplitBehavior behavior,
              bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  for (const Piece& piece : pieces) SplitPiece(piece, find, behavior, invert, out);
  pieces = std::move(out);
}

MatchFinder LiteralFinder(std::string literal) {
  return [literal = std::move(literal)](std::string_view text,
                                        std::vector<std::pair<size_t, size_t>>& matches) {
    if (literal.empty()) return;
    for (size_t at = text.find(literal); at != std::string_view::npos;
         at = text.find(literal, at + literal.size()))
      matches.emplace_back(at, at + literal.size());
  };
}

MatchFinder RegexFinder(std::shared_ptr<Regex> regex) {
  return [regex = std::move(regex)](std::string_view text,
                                    std::vector<std::pair<size_t, size_t>>& matches) {
    regex->FindAll(text, matches);
  };
}

// Matches maximal runs of code points for which `predicate` holds (or each one alone).
MatchFinder CodePointFinder(std::function<bool(char32_t)> predicate, bool individual) {
  return [predicate = std::move(predicate), individual](
             std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t start = pos;
      const char32_t cp = NextCodePoint(text, pos);
      if (!predicate(cp)) continue;
      if (!individual && !matches.empty() && matches.back().second == start) {
        matches.back().second = pos;
      } else {
        matches.emplace_back(start, pos);
      }
    }
  };
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(MatchFinder find, SplitBehavior behavior, bool invert)
      : find_(std::move(find)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    SplitAll(pieces, find_, behavior_, invert_);
  }

 private:
  MatchFinder find_;
  SplitBehavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_shared<Regex>(kGpt2Pattern);
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& piece : pieces)
        if (!piece.text.starts_with(' ')) piece.text = " " + piece.text;
    if (regex_) SplitAll(pieces, RegexFinder(regex_), SplitBehavior::kIsolated, false);
    for (Piece& piece : pieces) piece.text = ByteLevelEncode(piece.text);
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<Regex> regex_;
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, std::string scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {
    INFER_CHECK(scheme_ == "always" || scheme_ == "first" || scheme_ == "never",
                "Metaspace: prepend_scheme '{}' is not supported", scheme_);
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    for (Piece& piece : pieces) {
      std::string out;
      for (char c : piece.text) {
        if (c == ' ')
          out += replacement_;
        else
          out += c;
      }
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && piece.at_input_start);
      if (prepend && !out.starts_with(replacement_)) {
        std::string prefixed = replacement_;
        prefixed += out;
        out = std::move(prefixed);
      }
      piece.text = std::move(out);
    }
    if (split_)
      SplitAll(pieces, LiteralFinder(replacement_), SplitBehavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool IsRustWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsRustNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

}  // namespace

std::string ByteLevelEncode(std::string_view text) {
  const auto& table = ByteToUnicode();
  std::string out;
  out.reserve(text.size() * 2);
  for (char c : text) AppendUtf8(out, table[static_cast<uint8_t>(c)]);
  return out;
}

std::unique_ptr<PreTokenizer> CreatePreTokenizer(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  INFER_CHECK(config.is_object() && config.contains("type"), "pre_tokenizer: missing \"type\"");
  const std::string type = config["type"].get<std::string>();
  try {
    if (type == "Split") {
      const auto& pattern = config.at("pattern");
      MatchFinder find;
      if (pattern.contains("String")) {
        find = LiteralFinder(pattern["String"].get<std::string>());
      } else if (pattern.contains("Regex")) {
        find = RegexFinder(std::make_shared<Regex>(pattern["Regex"].get<std::string>()));
      } else {
        Fail("Split: pattern must be String or Regex");
      }
      return std::make_unique<SplitPreTokenizer>(
          std::move(find), ParseBehavior(config.at("behavior").get<std::string>()),
          config.value("invert", false));
    }
    if (type == "ByteLevel")
      return std::make_unique<ByteLevel>(config.value("add_prefix_space", true),
                                         config.value("use_regex", true));
    if (type == "Metaspace") {
      std::string scheme = config.value("prepend_scheme", "");
      if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
      return std::make_unique<Metaspace>(config.value("replacement", "\xE2\x96\x81"), scheme,
                                         config.value("split", true));
    }
    if (type == "Digits")
      return std::make_unique<SplitPreTokenizer>(
          CodePointFinder(IsRustNumeric, config.value("individual_digits", false)),
          SplitBehavior::kIsolated, false);
    if (type == "WhitespaceSplit")
      return std::make_unique<SplitPreTokenizer>(CodePointFinder(IsRustWhitespace, false),
                                                 SplitBehavior::kRemoved, false);
    if (type == "Whitespace")
      return std::make_unique<SplitPreTokenizer>(
          RegexFinder(std::make_shared<Regex>(R"(\w+|[^\w\s]+)")), SplitBehavior::kRemoved, true);
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> steps;
      for (const auto& step : config.at("pretokenizers"))
        if (auto pre_tokenizer = CreatePreTokenizer(step))
          steps.push_back(std::move(pre_tokenizer));
      return std::make_unique<SequencePreTokenizer>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail("pre_tokenizer {}: {}", type, e.what());
  }
  Fail("pre_tokenizer type '{}' is not supported", type);
}

}  // namespace infer
