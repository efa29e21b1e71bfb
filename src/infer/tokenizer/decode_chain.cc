// TokenDecoder implementations, mirroring the Rust crate's decode_chain of each type.
#include "infer/tokenizer/decode_chain.h"

#include "infer/core/error.h"
#include "infer/tokenizer/pcre_pattern.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

class ByteLevelDecoder : public TokenDecoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const size_t mark = bytes.size();
      size_t pos = 0;
      bool all_mapped = true;
      while (pos < token.size()) {
        const int byte = UnicodeToByte(NextCodePoint(token, pos));
        if (byte < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(byte));
      }
      if (!all_mapped) {  // HF keeps such a token's own UTF-8 bytes
        bytes.resize(mark);
        bytes.append(token);
      }
    }
    tokens.assign(1, Utf8Lossy(bytes));
  }
};

class ReplaceDecoder : public TokenDecoder {
 public:
  explicit ReplaceDecoder(const nlohmann::json& config) : replacer_(config, "Replace decoder") {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) replacer_.ReplaceAll(token);
  }

 private:
  PatternReplacer replacer_;
};

// "<0xNN>" -> NN, else -1.
int ParseByteToken(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  const HexDigits hex = ParseHexDigits(std::string_view(token).substr(3, 2));
  return hex.count == 2 ? static_cast<int>(hex.value) : -1;
}

class ByteFallbackDecoder : public TokenDecoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (IsValidUtf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      const int byte = ParseByteToken(token);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
  bool JoinsAcross(const std::string& token) const override { return ParseByteToken(token) >= 0; }
};

class FuseDecoder : public TokenDecoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.clear();
    tokens.push_back(std::move(joined));
  }
};

class StripDecoder : public TokenDecoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      const std::u32string chars = ToCodePoints(token);
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()); ++i) {
        if (chars[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < std::min(stop_, chars.size()); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      token =
          stop_cut > start_cut
              ? FromCodePoints(std::u32string_view(chars).substr(start_cut, stop_cut - start_cut))
              : std::string();
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public TokenDecoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first)
      : replacement_(replacement), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      size_t pos = 0;
      while (pos < tokens[i].size()) {
        const char32_t cp = NextCodePoint(tokens[i], pos);
        if (cp == replacement_) {
          if (!(i == 0 && strip_first_)) out.push_back(' ');
        } else {
          AppendUtf8(out, cp);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class SequenceDecoder : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }
  bool JoinsAcross(const std::string& token) const override {
    for (const auto& step : steps_)
      if (step->JoinsAcross(token)) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

char32_t SingleCodePoint(const std::string& text, const char* what) {
  const std::u32string cps = ToCodePoints(text);
  INFER_CHECK(cps.size() == 1, "decoder: {} must be one character", what);
  return cps[0];
}

}  // namespace

std::unique_ptr<TokenDecoder> CreateDecoder(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  INFER_CHECK(config.is_object() && config.contains("type"), "decoder: missing \"type\"");
  const std::string type = config["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "Replace") return std::make_unique<ReplaceDecoder>(config);
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip")
      return std::make_unique<StripDecoder>(
          SingleCodePoint(config.at("content").get<std::string>(), "Strip content"),
          config.at("start").get<size_t>(), config.at("stop").get<size_t>());
    if (type == "Metaspace") {
      std::string scheme = config.value("prepend_scheme", "");
      if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
      return std::make_unique<MetaspaceDecoder>(
          SingleCodePoint(config.value("replacement", "\xE2\x96\x81"), "Metaspace replacement"),
          scheme != "never");
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<TokenDecoder>> steps;
      for (const auto& step : config.at("decoders"))
        if (auto decoder = CreateDecoder(step)) steps.push_back(std::move(decoder));
      return std::make_unique<SequenceDecoder>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail("decoder {}: {}", type, e.what());
  }
  Fail("decoder type '{}' is not supported", type);
}

}  // namespace infer
