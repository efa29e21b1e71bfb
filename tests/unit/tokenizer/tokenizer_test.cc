// Tokenizer behaviour beyond the golden files: bad inputs fail loudly with one-line errors,
// EOS id sets, load time sanity, and small synthetic tokenizer.json files.
#include "infer/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "infer/core/error.h"
#include "infer/tokenizer/gguf_vocab.h"
#include "infer/tokenizer/pcre_pattern.h"
#include "infer/tokenizer/utf8.h"
#include "testing/paths.h"
#include "tokenizer_test_util.h"

namespace infer {
namespace {

// A tiny byte-level BPE tokenizer.json with the given overrides merged in.
std::string TinyTokenizerJson(const nlohmann::json& overrides = nlohmann::json::object()) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const char* token : {"a", "b", "c", "ab", "abc", "Ġ", "Ġa"}) vocab[token] = id++;
  nlohmann::json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {{{"id", 7},
         {"content", "<s>"},
         {"special", true},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"single_word", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"a b", "ab c", "Ġ a"}},
        {"unk_token", nullptr}}}};
  doc.merge_patch(overrides);
  return doc.dump();
}

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerTest, TinyByteLevelBpe) {
  auto tokenizer = Tokenizer::FromJsonText(TinyTokenizerJson(), "tiny");
  EXPECT_EQ(tokenizer->Encode("abc a<s>ab", false), (std::vector<int32_t>{4, 6, 7, 3}));
  EXPECT_EQ(tokenizer->Decode(std::vector<int32_t>{4, 6, 7, 3}, false), "abc a<s>ab");
  EXPECT_EQ(tokenizer->Decode(std::vector<int32_t>{4, 6, 7, 3}, true), "abc aab");
  EXPECT_EQ(tokenizer->Decode(std::vector<int32_t>{4, 999, -1}, false), "abc");  // unknown: skipped
  EXPECT_TRUE(tokenizer->IsSpecial(7));
  EXPECT_EQ(tokenizer->TokenToId("<s>"), 7);
  EXPECT_EQ(tokenizer->VocabSize(), 8);
}

TEST(TokenizerTest, InvalidUtf8InputIsAnError) {
  auto tokenizer = Tokenizer::FromJsonText(TinyTokenizerJson(), "tiny");
  for (const char* bad : {"\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"}) {
    const std::string message = ErrorOf([&] { tokenizer->Encode(bad, false); });
    EXPECT_NE(message.find("not valid UTF-8"), std::string::npos) << message;
  }
}

TEST(TokenizerTest, UnsupportedComponentsFailAtLoad) {
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"model", {{"type", "WordPiece"}}}}, "WordPiece"},
      {{{"normalizer", {{"type", "BertNormalizer"}}}}, "BertNormalizer"},
      {{{"normalizer", {{"type", "Precompiled"}}}}, "Precompiled"},
      {{{"pre_tokenizer", {{"type", "BertPreTokenizer"}}}}, "BertPreTokenizer"},
      {{{"pre_tokenizer",
         {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}}},
       "unclosed"},
      {{{"pre_tokenizer",
         {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Odd"}}}},
       "Odd"},
      {{{"decoder", {{"type", "WordPiece"}}}}, "WordPiece"},
      {{{"post_processor", {{"type", "Whatever"}}}}, "Whatever"},
      {{{"model", {{"dropout", 0.1}}}}, "dropout"},
      {{{"truncation", {{"max_length", 5}}}}, "truncation"},
      {{{"model", {{"merges", {"a zz"}}}}}, "zz"},
  };
  for (const auto& test_case : cases) {
    const auto& [overrides, expected] = test_case;
    const std::string message =
        ErrorOf([&] { Tokenizer::FromJsonText(TinyTokenizerJson(test_case.first), "tiny.json"); });
    EXPECT_NE(message.find(expected), std::string::npos) << overrides.dump() << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(TokenizerTest, CorruptJsonFailsLoudly) {
  const std::string good = TinyTokenizerJson();
  for (size_t cut : {size_t{0}, size_t{1}, good.size() / 3, good.size() / 2, good.size() - 1}) {
    const std::string message =
        ErrorOf([&] { Tokenizer::FromJsonText(good.substr(0, cut), "cut.json"); });
    EXPECT_NE(message.find("cut.json"), std::string::npos) << cut << ": " << message;
  }
  EXPECT_NE(ErrorOf([&] { Tokenizer::FromJsonText(good + "x", "trail.json"); }), "");
  EXPECT_NE(
      ErrorOf([&] { Tokenizer::FromJsonText("{\"model\": {\"vocab\": {\"\\ud800\": 1}}}", "s"); }),
      "");
}

TEST(TokenizerTest, MissingFilesAreOneLineErrors) {
  const auto dir = std::filesystem::temp_directory_path() / "infer_tokenizer_empty_dir";
  std::filesystem::create_directories(dir);
  const std::string message = ErrorOf([&] { Tokenizer::FromModelDir(dir); });
  EXPECT_NE(message.find("no tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(ErrorOf([&] { Tokenizer::FromFile(dir / "nope.json"); }), "");
}

TEST(TokenizerTest, OnigurumaWhitespaceClass) {
  // Oniguruma's \s (what HF uses) has U+0085 but not U+180E or U+FEFF.
  Regex regex(R"(\s+)");
  const auto match_all = [&](const std::string& text) {
    std::vector<std::pair<size_t, size_t>> matches;
    regex.FindAll(text, matches);
    return matches.size() == 1 && matches[0] == std::make_pair(size_t{0}, text.size());
  };
  EXPECT_TRUE(match_all("\xc2\x85"));
  EXPECT_TRUE(match_all(" \t\n\xe3\x80\x80"));
  EXPECT_FALSE(match_all("\xe1\xa0\x8e"));
  EXPECT_FALSE(match_all("\xef\xbb\xbf"));
}

TEST(TokenizerTest, Utf8LossyMatchesRust) {
  EXPECT_EQ(Utf8Lossy("a\xff"
                      "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(Utf8Lossy("\xe2\x82"), "\xef\xbf\xbd");  // truncated: one replacement
  EXPECT_EQ(Utf8Lossy("\xe2\x82x"), "\xef\xbf\xbdx");
  EXPECT_EQ(Utf8Lossy("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(Utf8Lossy("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}

struct EosCase {
  const char* model;
  const char* config_dir;
  std::vector<int32_t> eos;
};

class TokenizerEosTest : public ::testing::TestWithParam<EosCase> {};

TEST_P(TokenizerEosTest, EosIdsFromGenerationConfigAndTokenizerConfig) {
  const EosCase& c = GetParam();
  if (!testing::RequireRealTokenizer(c.model)) return;
  const auto dir = std::filesystem::temp_directory_path() / (std::string("infer_eos_") + c.model);
  std::filesystem::create_directories(dir);
  const auto configs =
      std::filesystem::path(::infer::testing::FixturesDir()) / "configs" / c.config_dir;
  for (const char* name : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(configs / name, dir / name,
                               std::filesystem::copy_options::overwrite_existing);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(testing::RealTokenizerDir(c.model) / name, dir / name,
                               std::filesystem::copy_options::overwrite_existing);
  auto tokenizer = Tokenizer::FromModelDir(dir);
  std::vector<int32_t> eos = LoadEosTokenIds(dir, tokenizer.get());
  std::sort(eos.begin(), eos.end());
  std::vector<int32_t> expected = c.eos;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(eos, expected);
  // Without generation_config.json, tokenizer_config's eos_token still counts.
  std::filesystem::remove(dir / "generation_config.json");
  std::filesystem::remove(dir / "config.json");
  const auto from_tokenizer = LoadEosTokenIds(dir, tokenizer.get());
  ASSERT_EQ(from_tokenizer.size(), 1u);
  EXPECT_NE(std::find(expected.begin(), expected.end(), from_tokenizer[0]), expected.end());
}

INSTANTIATE_TEST_SUITE_P(
    Models, TokenizerEosTest,
    ::testing::Values(EosCase{"llama3", "Llama-3.2-1B-Instruct", {128001, 128008, 128009}},
                      EosCase{"qwen3", "Qwen3-1.7B", {151645, 151643}},
                      EosCase{"gemma3", "gemma-3-1b-it", {1, 106}}),
    [](const auto& info) { return std::string(info.param.model); });

TEST(TokenizerTest, RealTokenizersLoadQuickly) {
  // A loose sanity bound (Release builds take ~0.1-0.4 s; sanitizer builds are slower).
  for (const char* model : {"llama3", "qwen3", "gemma3"}) {
    if (!testing::RequireRealTokenizer(model)) return;
    const auto start = std::chrono::steady_clock::now();
    auto tokenizer = Tokenizer::FromModelDir(testing::RealTokenizerDir(model));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0) << model;
    EXPECT_GT(tokenizer->VocabSize(), 128000);
  }
}

}  // namespace
}  // namespace infer

namespace infer {
namespace {

TEST(TokenizerTest, NormalizedAddedTokensMatchAfterNormalization) {
  // A Lowercase normalizer and a normalized added token "AB": "ab" and "AB" both match it.
  const nlohmann::json overrides = {
      {"normalizer", {{"type", "Lowercase"}}},
      {"added_tokens",
       {{{"id", 8}, {"content", "AB"}, {"special", false}, {"normalized", true}},
        {{"id", 7}, {"content", "<S>"}, {"special", true}, {"normalized", false}}}}};
  auto tokenizer = Tokenizer::FromJsonText(TinyTokenizerJson(overrides), "tiny");
  EXPECT_EQ(tokenizer->Encode("cABc<S>", false), (std::vector<int32_t>{2, 8, 2, 7}));
}

}  // namespace
}  // namespace infer

namespace infer {
namespace {

// A GGUF file's tokenizer keys are input like any other: whatever they hold, FromGguf gives a
// tokenizer or throws infer::Error naming the file; it never crashes.
TEST(GgufVocabTest, BadTokenizerKeysAreErrors) {
  const auto base = [] {
    GgufVocab vocab;
    vocab.model = "gpt2";
    vocab.pre = "llama-bpe";
    vocab.tokens = {"a", "b", "ab", "<s>"};
    vocab.token_types = {1, 1, 1, 3};
    vocab.merges = {"a b"};
    vocab.bos_id = 3;
    return vocab;
  };
  auto tokenizer = Tokenizer::FromGguf(base(), "x.gguf");
  EXPECT_EQ(tokenizer->Encode("abab", true), (std::vector<int32_t>{3, 2, 2}));
  EXPECT_TRUE(tokenizer->IsSpecial(3));
  const std::vector<std::pair<std::function<void(GgufVocab&)>, std::string>> cases = {
      {[](GgufVocab& v) { v.model = "bert"; }, "tokenizer.ggml.model 'bert'"},
      {[](GgufVocab& v) { v.pre = "smaug-bpe"; }, "tokenizer.ggml.pre 'smaug-bpe'"},
      {[](GgufVocab& v) { v.tokens.clear(); }, "tokenizer.ggml.tokens is empty"},
      {[](GgufVocab& v) { v.token_types = {1}; }, "token_type has 1 entries"},
      {[](GgufVocab& v) { v.bos_id = 99; }, "bos_token_id 99"},
      {[](GgufVocab& v) { v.eos_id = -1; }, "eos_token_id -1"},
      {[](GgufVocab& v) { v.tokens[0].assign(1, static_cast<char>(0xff)); }, "not valid UTF-8"},
      {[](GgufVocab& v) { v.merges = {"ab"}; }, "not two space-separated"},
      {[](GgufVocab& v) { v.merges = {"x y"}; }, "x.gguf"},
      {[](GgufVocab& v) { v.tokens[1] = v.tokens[0]; }, "x.gguf"},
      {[](GgufVocab& v) {
         v.model = "llama";
         v.scores = {0.0};
       },
       "scores has 1 entries"},
  };
  for (const auto& [mutate, expected] : cases) {
    GgufVocab vocab = base();
    mutate(vocab);
    const std::string message = ErrorOf([&] { Tokenizer::FromGguf(vocab, "x.gguf"); });
    EXPECT_NE(message.find(expected), std::string::npos) << expected << " -> " << message;
    EXPECT_TRUE(message.starts_with("x.gguf")) << message;
  }
  // Token types outside llama.cpp's are read as normal tokens; odd ids in the SentencePiece
  // route (an unknown id out of range, empty pieces) still give a tokenizer.
  GgufVocab odd = base();
  odd.token_types = {1, 99, -5, 3};
  EXPECT_NO_THROW(Tokenizer::FromGguf(odd, "x.gguf"));
  GgufVocab pieces;
  pieces.model = "llama";
  pieces.tokens = {"", "a", "b", "ab", "<0x41>"};
  pieces.scores = {0, 0, 0, -1, 0};
  pieces.token_types = {2, 1, 1, 1, 6};
  pieces.unknown_id = 77;
  auto spm = Tokenizer::FromGguf(pieces, "x.gguf");
  EXPECT_EQ(spm->Encode("ab", false), (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace infer
