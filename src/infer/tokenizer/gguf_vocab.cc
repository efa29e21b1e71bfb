#include "infer/tokenizer/gguf_vocab.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <unordered_map>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

using json = nlohmann::json;

constexpr std::string_view kSpace = "\xe2\x96\x81";  // '▁', SentencePiece's space

// A byte-level BPE family by its tokenizer.ggml.pre name: the split pattern, normalizer and
// merge rule of its Hugging Face tokenizer.json.
struct BytePreTokenizer {
  std::vector<std::string_view> names;  // as llama.cpp accepts them
  std::string_view pattern;
  bool nfc = false;              // an NFC normalizer (Qwen2's tokenizers)
  bool ignore_merges = false;    // a word in the vocabulary is taken whole (Llama 3)
  bool add_bos_default = false;  // when the file does not say
};

const std::array<BytePreTokenizer, 3>& BytePreTokenizers() {
  static const std::array<BytePreTokenizer, 3> kTable = {{
      {{"llama-bpe", "llama3", "llama-v3"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false,
       true,
       true},
      {{"qwen2"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       true,
       false,
       false},
      // Qwen3.5's: Qwen2's with combining marks (\p{M}) kept inside words.
      {{"qwen35"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       true,
       false,
       false},
  }};
  return kTable;
}

GgufTokenType TypeOf(const GgufVocab& vocab, size_t id) {
  return vocab.token_types.empty() ? GgufTokenType::kNormal
                                   : static_cast<GgufTokenType>(vocab.token_types[id]);
}

json AddedToken(int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// TemplateProcessing with BOS before (and EOS after) the sequence, as the file asks.
json PostProcessor(const GgufVocab& vocab, bool add_bos) {
  const bool add_eos = vocab.add_eos.value_or(false) && vocab.eos_id;
  add_bos = add_bos && vocab.bos_id;
  if (!add_bos && !add_eos) return nullptr;
  json single = json::array();
  json specials = json::object();
  const auto special = [&](int64_t id) {
    const std::string& token = vocab.tokens[static_cast<size_t>(id)];
    specials[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
    return json{{"SpecialToken", {{"id", token}, {"type_id", 0}}}};
  };
  if (add_bos) single.push_back(special(*vocab.bos_id));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) single.push_back(special(*vocab.eos_id));
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
}

void ByteLevel(const GgufVocab& vocab, const std::string& source, TokenizerJson& out) {
  const auto& table = BytePreTokenizers();
  const auto rule = std::find_if(table.begin(), table.end(), [&](const BytePreTokenizer& r) {
    return std::find(r.names.begin(), r.names.end(), vocab.pre) != r.names.end();
  });
  INFER_CHECK(rule != table.end(),
              "{}: tokenizer.ggml.pre '{}' is not a pre-tokenizer infer knows ({}); put the "
              "model's tokenizer.json beside the file",
              source, vocab.pre, fmt::join(KnownGgufPreTokenizers(), ", "));
  json added = json::array();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const GgufTokenType type = TypeOf(vocab, id);
    if (type == GgufTokenType::kUnused) continue;  // the converter's padding
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined) {
      added.push_back(
          AddedToken(static_cast<int64_t>(id), vocab.tokens[id], type == GgufTokenType::kControl));
    } else {
      out.vocab.emplace_back(vocab.tokens[id], static_cast<int32_t>(id));
    }
  }
  for (const std::string& merge : vocab.merges) {
    const size_t space = merge.find(' ');
    INFER_CHECK(space != std::string::npos && merge.find(' ', space + 1) == std::string::npos,
                "{}: tokenizer.ggml.merges entry '{}' is not two space-separated tokens", source,
                merge);
    out.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  out.config["added_tokens"] = std::move(added);
  out.config["normalizer"] = rule->nfc ? json{{"type", "NFC"}} : json(nullptr);
  out.config["pre_tokenizer"] = {{"type", "Sequence"},
                                 {"pretokenizers",
                                  {{{"type", "Split"},
                                    {"pattern", {{"Regex", std::string(rule->pattern)}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   byte_level}}};
  out.config["post_processor"] =
      PostProcessor(vocab, vocab.add_bos.value_or(rule->add_bos_default));
  out.config["decoder"] = byte_level;
  out.config["model"] = {{"type", "BPE"},
                         {"dropout", nullptr},
                         {"unk_token", nullptr},
                         {"continuing_subword_prefix", nullptr},
                         {"end_of_word_suffix", nullptr},
                         {"fuse_unk", false},
                         {"byte_fallback", false},
                         {"ignore_merges", rule->ignore_merges}};
}

// The merges a SentencePiece vocabulary implies, as Hugging Face's SentencePieceExtractor
// orders them: every split of a piece into two pieces of the vocabulary, by the piece's score
// (highest first), then the left half's length and the right half's (longest first, in code
// points), then the piece's id and the halves' ids.
std::vector<std::pair<std::string, std::string>> ScoreMerges(const std::vector<std::string>& pieces,
                                                             const GgufVocab& vocab) {
  std::unordered_map<std::string_view, int64_t> ids;
  ids.reserve(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) ids.emplace(pieces[id], static_cast<int64_t>(id));
  struct Candidate {
    double score;
    int64_t left_length, right_length, piece, left, right;
  };
  std::vector<Candidate> candidates;
  for (size_t id = 0; id < pieces.size(); ++id) {
    const GgufTokenType type = TypeOf(vocab, id);
    if (type != GgufTokenType::kNormal && type != GgufTokenType::kUserDefined) continue;
    const std::string_view piece = pieces[id];
    const auto length = static_cast<int64_t>(CountCodePoints(piece));
    int64_t left_length = 0;
    for (size_t at = 0; at < piece.size();) {
      at += Utf8SequenceLength(static_cast<unsigned char>(piece[at]));
      ++left_length;
      if (at >= piece.size()) break;
      const auto left = ids.find(piece.substr(0, at));
      const auto right = ids.find(piece.substr(at));
      if (left == ids.end() || right == ids.end()) continue;
      candidates.push_back({vocab.scores[id], left_length, length - left_length,
                            static_cast<int64_t>(id), left->second, right->second});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_length != b.left_length) return a.left_length > b.left_length;
    if (a.right_length != b.right_length) return a.right_length > b.right_length;
    return std::tie(a.piece, a.left, a.right) < std::tie(b.piece, b.left, b.right);
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    merges.emplace_back(pieces[static_cast<size_t>(c.left)], pieces[static_cast<size_t>(c.right)]);
  }
  return merges;
}

void SentencePiece(const GgufVocab& vocab, const std::string& source, TokenizerJson& out) {
  INFER_CHECK(vocab.scores.size() == vocab.tokens.size(),
              "{}: tokenizer.ggml.scores has {} entries for {} tokens", source, vocab.scores.size(),
              vocab.tokens.size());
  // The converter wrote user-defined pieces with their '▁' as spaces; the pieces are '▁'.
  std::vector<std::string> pieces = vocab.tokens;
  json added = json::array();
  for (size_t id = 0; id < pieces.size(); ++id) {
    const GgufTokenType type = TypeOf(vocab, id);
    if (type == GgufTokenType::kUserDefined) {
      std::string piece;
      for (const char c : pieces[id]) piece += c == ' ' ? std::string(kSpace) : std::string(1, c);
      pieces[id] = std::move(piece);
    }
    if (type == GgufTokenType::kControl || type == GgufTokenType::kUserDefined ||
        type == GgufTokenType::kUnknown) {
      added.push_back(
          AddedToken(static_cast<int64_t>(id), pieces[id], type != GgufTokenType::kUserDefined));
    }
    if (type != GgufTokenType::kUnused) {
      out.vocab.emplace_back(pieces[id], static_cast<int32_t>(id));
    }
  }
  out.merges = ScoreMerges(pieces, vocab);
  const json replace = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kSpace)}};
  json decoders = {
      {{"type", "Replace"}, {"pattern", {{"String", std::string(kSpace)}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}}};
  // llama.cpp's default for a SentencePiece vocabulary that does not say: a space is prepended.
  if (vocab.add_space_prefix.value_or(true)) {
    out.config["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", {{{"type", "Prepend"}, {"prepend", std::string(kSpace)}}, replace}}};
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  } else {
    out.config["normalizer"] = replace;
  }
  out.config["added_tokens"] = std::move(added);
  out.config["pre_tokenizer"] = nullptr;
  out.config["post_processor"] = PostProcessor(vocab, vocab.add_bos.value_or(true));
  out.config["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  const bool has_unknown = vocab.unknown_id && *vocab.unknown_id >= 0 &&
                           static_cast<size_t>(*vocab.unknown_id) < vocab.tokens.size();
  out.config["model"] = {
      {"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", has_unknown ? json(pieces[static_cast<size_t>(*vocab.unknown_id)]) : json()},
      {"continuing_subword_prefix", nullptr},
      {"end_of_word_suffix", nullptr},
      {"fuse_unk", true},
      {"byte_fallback", true},
      {"ignore_merges", false}};
}

}  // namespace

std::vector<std::string> KnownGgufPreTokenizers() {
  std::vector<std::string> names;
  for (const BytePreTokenizer& rule : BytePreTokenizers()) {
    names.insert(names.end(), rule.names.begin(), rule.names.end());
  }
  return names;
}

TokenizerJson GgufTokenizerJson(const GgufVocab& vocab, const std::string& source) {
  const size_t n = vocab.tokens.size();
  INFER_CHECK(n > 0, "{}: tokenizer.ggml.tokens is empty", source);
  INFER_CHECK(vocab.token_types.empty() || vocab.token_types.size() == n,
              "{}: tokenizer.ggml.token_type has {} entries for {} tokens", source,
              vocab.token_types.size(), n);
  for (const auto& [key, id] :
       {std::pair{"bos_token_id", vocab.bos_id}, std::pair{"eos_token_id", vocab.eos_id}}) {
    INFER_CHECK(!id || (*id >= 0 && static_cast<size_t>(*id) < n),
                "{}: tokenizer.ggml.{} {} is outside the {} tokens", source, key, *id, n);
  }
  for (const std::string& token : vocab.tokens) {
    INFER_CHECK(IsValidUtf8(token), "{}: a token of tokenizer.ggml.tokens is not valid UTF-8",
                source);
  }
  TokenizerJson out;
  out.config = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (vocab.model == "gpt2") {
    ByteLevel(vocab, source, out);
  } else if (vocab.model == "llama") {
    SentencePiece(vocab, source, out);
  } else {
    Fail(
        "{}: tokenizer.ggml.model '{}' is not one infer reads (gpt2, llama); put the model's "
        "tokenizer.json beside the file",
        source, vocab.model);
  }
  return out;
}

}  // namespace infer
