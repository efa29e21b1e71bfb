// Token masks: every mask equals the brute-force set (each token's bytes tried on a byte
// matcher), on synthetic vocabularies and on the real llama3, qwen3 and gemma3 ones; random
// walks whose outputs must parse (nlohmann); UTF-8 split across tokens; special and end tokens;
// rollback; jump-forward; the compiled-grammar cache.
#include <atomic>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar_test_util.h"
#include "infer/grammar/grammar_cache.h"
#include "infer/grammar/grammar_error.h"
#include "testing/sanitized.h"

namespace infer::grammar {
namespace {

std::shared_ptr<const VocabularyIndex> MakeVocab(std::vector<std::string> tokens,
                                                 std::vector<int32_t> special = {},
                                                 std::vector<int32_t> end = {}) {
  Vocabulary v;
  v.token_bytes = std::move(tokens);
  v.special_ids = std::move(special);
  v.end_ids = std::move(end);
  return std::make_shared<const VocabularyIndex>(std::move(v));
}

std::vector<uint32_t> Mask(GrammarMatcher& m, int64_t vocab_size) {
  std::vector<uint32_t> bits(GrammarMatcher::BitmaskWords(vocab_size), 0xDEADBEEF);
  m.FillNextTokenBitmask(bits);
  return bits;
}

bool Bit(const std::vector<uint32_t>& bits, int32_t id) { return (bits[id >> 5] >> (id & 31)) & 1; }

// The reference: each token's bytes tried on a byte matcher in the same state.
std::vector<uint32_t> BruteForceMask(ByteMatcher& bytes, const VocabularyIndex& vocab,
                                     int64_t vocab_size) {
  std::vector<uint32_t> bits(GrammarMatcher::BitmaskWords(vocab_size), 0);
  const auto& v = vocab.vocabulary();
  for (int32_t id = 0; id < static_cast<int32_t>(v.token_bytes.size()); ++id) {
    if (!vocab.IsRegular(id)) continue;
    bytes.Checkpoint();
    const bool ok = bytes.AcceptString(v.token_bytes[id]);
    bytes.Rollback(1);
    if (ok) bits[id >> 5] |= 1u << (id & 31);
  }
  if (bytes.IsComplete()) {
    for (int32_t id : v.end_ids) bits[id >> 5] |= 1u << (id & 31);
  }
  return bits;
}

std::vector<int32_t> Allowed(const std::vector<uint32_t>& bits, int64_t vocab_size) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (Bit(bits, id)) ids.push_back(id);
  }
  return ids;
}

// The ids whose bit differs between the matcher's mask after `prefix` and brute force; nullopt
// when the reference rejects `prefix` (a failure too when the reference takes it and the matcher
// does not).
std::optional<std::vector<int32_t>> MismatchesAfter(
    const std::shared_ptr<const CompiledGrammar>& compiled, const std::string& prefix,
    int64_t vocab_size) {
  GrammarMatcher matcher(compiled);
  ByteMatcher reference(compiled->flat_ptr());
  if (!reference.AcceptString(prefix)) return std::nullopt;
  if (!matcher.AcceptString(prefix)) {
    ADD_FAILURE() << "the matcher rejects '" << prefix << "'";
    return std::nullopt;
  }
  const auto bits = Mask(matcher, vocab_size);
  const auto expected = BruteForceMask(reference, compiled->vocabulary(), vocab_size);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (Bit(bits, id) != Bit(expected, id)) ids.push_back(id);
  }
  return ids;
}

// Random walk: uniform among allowed tokens; checks masks against brute force every
// `check_every` steps (three times as far apart under the sanitizers, where the brute force
// over a real vocabulary is most of CI's time; the walks and masks are the same); returns the
// output text, `terminated` says whether an end token came.
std::string RandomWalk(const std::shared_ptr<const CompiledGrammar>& compiled, uint32_t seed,
                       int max_tokens, int check_every, bool& terminated) {
  if (infer::testing::kSanitized) check_every *= 3;
  const VocabularyIndex& vocab = compiled->vocabulary();
  const int64_t vocab_size = vocab.NumIds() + 100;  // the model's vocab may be larger
  GrammarMatcher matcher(compiled);
  ByteMatcher reference(compiled->flat_ptr());
  std::mt19937 rng(seed);
  std::string out;
  terminated = false;
  for (int step = 0; step < max_tokens && !matcher.IsTerminated(); ++step) {
    const auto bits = Mask(matcher, vocab_size);
    for (int32_t id = vocab.NumIds(); id < vocab_size; ++id) EXPECT_FALSE(Bit(bits, id));
    if (check_every > 0 && step % check_every == 0) {
      const auto expected = BruteForceMask(reference, vocab, vocab_size);
      for (size_t w = 0; w < expected.size(); ++w) {
        if (expected[w] == bits[w]) continue;
        for (int32_t id = static_cast<int32_t>(w * 32); id < static_cast<int32_t>(w * 32 + 32);
             ++id) {
          if (Bit(expected, id) != Bit(bits, id)) {
            ADD_FAILURE() << "step " << step << " after '" << out << "': token " << id << " '"
                          << (id < static_cast<int32_t>(vocab.vocabulary().token_bytes.size())
                                  ? vocab.vocabulary().token_bytes[id]
                                  : std::string("?"))
                          << "' expected " << Bit(expected, id);
            return out;
          }
        }
      }
    }
    const auto allowed = Allowed(bits, vocab_size);
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after '" << out << "'";
      return out;
    }
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(matcher.AcceptToken(id));
    if (vocab.IsEnd(id)) {
      EXPECT_TRUE(matcher.IsTerminated());
      terminated = true;
      break;
    }
    const std::string& bytes = vocab.vocabulary().token_bytes[id];
    EXPECT_TRUE(reference.AcceptString(bytes));
    out += bytes;
  }
  return out;
}

// Appends every string of 1 to `max_len` bytes over `alphabet`, shortest first.
void AppendAllStrings(std::string_view alphabet, int max_len, std::vector<std::string>& out) {
  std::vector<std::string> level{""};
  for (int len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const auto& p : level) {
      for (char c : alphabet) next.push_back(p + c);
    }
    out.insert(out.end(), next.begin(), next.end());
    level = std::move(next);
  }
}

// Every string up to 3 characters over a JSON-ish alphabet, plus special and end tokens.
std::shared_ptr<const VocabularyIndex> SmallJsonVocab(int32_t& end_id, int32_t& special_id) {
  // Enough letters that every prefix can be completed (true, false, null, \u escapes).
  std::vector<std::string> tokens{""};
  AppendAllStrings("{}[],:\" a1e.-\\nulfrst\xC3\xA9", 3, tokens);
  tokens.push_back("true");
  tokens.push_back("null");
  tokens.push_back("\"}");  // duplicates of existing bytes are fine
  end_id = static_cast<int32_t>(tokens.size());
  tokens.push_back("</s>");  // bytes of an end token are never used as text
  special_id = static_cast<int32_t>(tokens.size());
  tokens.push_back("{");
  return MakeVocab(tokens, {special_id}, {end_id});
}

// Ranges to bits and back, against one bit at a time: runs within a word, across words, of
// whole words, at the bitset's ends.
TEST(RankBitsTest, SetRangeAndRangesOfEqualOneBitAtATime) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t words = 1 + rng() % 6;
    const auto n = static_cast<int32_t>(words * 64);
    std::vector<uint64_t> bits(words, 0);
    std::vector<bool> expected(static_cast<size_t>(n), false);
    for (int k = 0, ranges = static_cast<int>(rng() % 5); k < ranges; ++k) {
      const auto begin = static_cast<int32_t>(rng() % static_cast<uint32_t>(n));
      const int32_t end =
          std::min(n, begin + static_cast<int32_t>(rng() % (trial % 3 == 0 ? 200 : 70)));
      SetRange(bits, {begin, end});
      for (int32_t r = begin; r < end; ++r) expected[static_cast<size_t>(r)] = true;
    }
    if (trial % 7 == 0) bits.back() |= uint64_t{1} << 63;  // a run up to the last rank
    if (trial % 7 == 0) expected.back() = true;
    for (int32_t r = 0; r < n; ++r) {
      ASSERT_EQ(((bits[static_cast<size_t>(r) >> 6] >> (r & 63)) & 1u) != 0,
                expected[static_cast<size_t>(r)])
          << "trial " << trial << " rank " << r;
    }
    std::vector<RankRange> ranges, one_by_one;
    RangesOf(bits, ranges);
    for (int32_t r = 0; r < n; ++r) {
      if (expected[static_cast<size_t>(r)]) AppendRange(one_by_one, r, r + 1);
    }
    ASSERT_EQ(ranges.size(), one_by_one.size()) << "trial " << trial;
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(ranges[i].begin, one_by_one[i].begin) << "trial " << trial;
      EXPECT_EQ(ranges[i].end, one_by_one[i].end) << "trial " << trial;
    }
  }
}

// 64 bytes to one word of a bitset by rank, against a byte at a time: every threshold, with and
// without the low-seven-bits mask (forced counts carry a flag in the high bit).
TEST(RankBitsTest, BytesAboveAndHighBitEqualOneByteAtATime) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint8_t> bytes(64);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(trial % 4 == 0 ? rng() % 8 : rng());
    uint64_t high = 0;
    for (size_t i = 0; i < 64; ++i) high |= static_cast<uint64_t>(bytes[i] >> 7) << i;
    ASSERT_EQ(BytesHighBit(bytes.data()), high) << "trial " << trial;
    for (int t = 0; t < 256; ++t) {
      for (const uint8_t mask : {uint8_t{0xff}, uint8_t{0x7f}}) {
        uint64_t expected = 0;
        for (size_t i = 0; i < 64; ++i)
          expected |= static_cast<uint64_t>((bytes[i] & mask) > t) << i;
        ASSERT_EQ(BytesAbove(bytes.data(), static_cast<uint8_t>(t), mask), expected)
            << "trial " << trial << " threshold " << t << " mask " << int{mask};
      }
    }
  }
}

TEST(TokenMaskTest, SyntheticVocabularyMasksEqualBruteForce) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  auto compiled = CompiledGrammar::FromGbnf(testing::kJsonGbnf, vocab);
  int terminated_count = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, seed, 60, 1, terminated);
    if (HasFailure()) return;
    if (terminated) {
      ++terminated_count;
      EXPECT_TRUE(nlohmann::json::accept(out)) << out;
    }
  }
  EXPECT_GT(terminated_count, 3);
}

TEST(TokenMaskTest, SpecialTokensNeverEndTokensExactlyWhenComplete) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  auto compiled = CompiledGrammar::FromGbnf("root ::= \"{\" \"a\"* \"}\" \" \"?", vocab);
  GrammarMatcher m(compiled);
  const int64_t size = vocab->NumIds();
  auto bits = Mask(m, size);
  EXPECT_FALSE(Bit(bits, special_id));
  EXPECT_FALSE(Bit(bits, end_id));
  EXPECT_FALSE(m.AcceptToken(special_id));
  EXPECT_FALSE(m.AcceptToken(end_id));
  ASSERT_TRUE(m.AcceptString("{a"));
  EXPECT_FALSE(Bit(Mask(m, size), end_id));
  GrammarMatcher done(compiled);
  ASSERT_TRUE(done.AcceptString("{aa}"));
  EXPECT_TRUE(done.IsComplete());
  EXPECT_TRUE(done.CanContinue());  // the optional space
  bits = Mask(done, size);
  EXPECT_TRUE(Bit(bits, end_id));
  EXPECT_FALSE(Bit(bits, special_id));
  ASSERT_TRUE(done.AcceptString(" "));
  EXPECT_FALSE(done.CanContinue());
  bits = Mask(done, size);
  EXPECT_EQ(Allowed(bits, size), std::vector<int32_t>{end_id});  // only the end
  EXPECT_TRUE(done.AcceptToken(end_id));
  EXPECT_TRUE(done.IsTerminated());
  bits = Mask(done, size);
  EXPECT_TRUE(Allowed(bits, size).empty());
  EXPECT_FALSE(done.AcceptToken(end_id));
  done.Rollback(1);  // undoes the termination
  EXPECT_FALSE(done.IsTerminated());
  EXPECT_EQ(Allowed(Mask(done, size), size), std::vector<int32_t>{end_id});
}

TEST(TokenMaskTest, MultiByteCharactersSplitAcrossTokens) {
  // Tokens: whole "€" (E2 82 AC), its bytes alone, its pieces, "é" (C3 A9) and "x".
  auto vocab = MakeVocab({"\xE2\x82\xAC", "\xE2", "\x82", "\xAC", "\xE2\x82", "\x82\xAC", "\xC3",
                          "\xA9", "x", "\xAC\xE2"});
  auto compiled = CompiledGrammar::FromGbnf("root ::= [^x]+", vocab);
  GrammarMatcher m(compiled);
  const int64_t size = vocab->NumIds();
  EXPECT_EQ(Allowed(Mask(m, size), size), (std::vector<int32_t>{0, 1, 4, 6}));
  ASSERT_TRUE(m.AcceptToken(1));  // E2
  // Any continuation byte can follow E2 (U+2000..U+2FFF).
  EXPECT_EQ(Allowed(Mask(m, size), size), (std::vector<int32_t>{2, 3, 5, 7}));
  ASSERT_TRUE(m.AcceptToken(2));  // 82
  // Any continuation byte completes E2 82 _ (U+2080..U+20BF).
  EXPECT_EQ(Allowed(Mask(m, size), size), (std::vector<int32_t>{2, 3, 7, 9}));
  ASSERT_TRUE(m.AcceptToken(9));  // AC E2
  EXPECT_FALSE(m.IsComplete());   // inside the second "€"
  ASSERT_TRUE(m.AcceptToken(5));  // 82 AC
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.AcceptToken(7));  // a lone continuation byte
  EXPECT_FALSE(m.AcceptToken(8));  // "x" is excluded
}

TEST(TokenMaskTest, RollbackRestoresIdenticalMasks) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  auto compiled = CompiledGrammar::FromGbnf(testing::kJsonGbnf, vocab);
  GrammarMatcher m(compiled);
  const int64_t size = vocab->NumIds();
  std::mt19937 rng(7);
  std::vector<std::vector<uint32_t>> masks;
  for (int step = 0; step < 30 && !m.IsTerminated(); ++step) {
    masks.push_back(Mask(m, size));
    const auto allowed = Allowed(masks.back(), size);
    ASSERT_FALSE(allowed.empty());
    ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
  }
  const int n = static_cast<int>(masks.size());
  m.Rollback(n / 2);
  EXPECT_EQ(Mask(m, size), masks[n - n / 2]);
  m.Rollback(n - n / 2);
  EXPECT_EQ(Mask(m, size), masks[0]);
  EXPECT_EQ(m.NumAcceptedTokens(), 0u);
  EXPECT_THROW(m.Rollback(1), infer::Error);
}

TEST(TokenMaskTest, JumpForwardString) {
  auto vocab = MakeVocab({"a", "b"});
  auto compiled = CompiledGrammar::FromGbnf(
      "root ::= \"{\\\"name\\\": \" ( \"\\\"abc\\\"\" | \"\\\"abd\\\"\" ) \"}\"", vocab);
  GrammarMatcher m(compiled);
  EXPECT_EQ(m.JumpForwardString(), "{\"name\": \"ab");
  ASSERT_TRUE(m.AcceptString("{\"name\": \"abc"));
  EXPECT_EQ(m.JumpForwardString(), "\"}");
  ASSERT_TRUE(m.AcceptString("\"}"));
  EXPECT_EQ(m.JumpForwardString(), "");  // complete: may end
  auto optional = CompiledGrammar::FromGbnf("root ::= \"x\" \"y\"?", vocab);
  GrammarMatcher o(optional);
  EXPECT_EQ(o.JumpForwardString(), "x");
  ASSERT_TRUE(o.AcceptString("x"));
  EXPECT_EQ(o.JumpForwardString(), "");
}

TEST(TokenMaskTest, AStepOverTooManyStacksIsRefusedNotAHang) {
  // Repetitions nested in groups, (((([a-z]*)+)+)*...): each closure stays below
  // Stepper::kMaxClosure, but a mask closes each of thousands of frames on its own. Without a
  // bound on the step, 40 tokens took 0.24 s at 16 deep, 6 s at 19 and 25 s at 20 (then
  // kMaxClosure), and gbnf_fuzz's 30 s run timed out on `[a-z]*+++...*?*` (before stacked
  // operators were parsed as one). The mask's StepBudget refuses 16 deep with GrammarError (the
  // request fails, the batch goes on); 12 deep still matches.
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.emplace_back(1, c);
  const auto vocab = MakeVocab(tokens);
  auto nested = [](int depth) {
    std::string text = "root ::= " + std::string(static_cast<size_t>(depth), '(') + "[a-z]*";
    for (int i = 1; i <= depth; ++i) text += i % 3 == 0 ? ")*" : ")+";
    return text + "\n";
  };
  GrammarMatcher deep(CompiledGrammar::FromGbnf(nested(16), vocab));
  try {
    Mask(deep, 26);
    ADD_FAILURE() << "the mask was computed";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("one step visits more than"), std::string::npos)
        << e.what();
  }
  GrammarMatcher shallower(CompiledGrammar::FromGbnf(nested(12), vocab));
  for (int i = 0; i < 40; ++i) {
    const auto bits = Mask(shallower, 26);
    ASSERT_TRUE(Bit(bits, i % 26));
    ASSERT_TRUE(shallower.AcceptToken(i % 26));
  }
}

TEST(TokenMaskTest, BitmaskWiderThanTheVocabulary) {
  auto vocab = MakeVocab({"a", "b", ""});
  auto compiled = CompiledGrammar::FromGbnf("root ::= [a-z]*", vocab);
  GrammarMatcher m(compiled);
  std::vector<uint32_t> bits(8, 0xFFFFFFFF);
  m.FillNextTokenBitmask(bits);
  EXPECT_EQ(bits[0], 3u);
  for (size_t w = 1; w < bits.size(); ++w) EXPECT_EQ(bits[w], 0u);
  EXPECT_FALSE(m.AcceptToken(2));    // empty bytes: never
  EXPECT_FALSE(m.AcceptToken(200));  // beyond the vocabulary
}

// A schema-like grammar whose every walk terminates: fixed keys, an enum, bounded strings,
// bounded numbers, a bounded nested array.
constexpr std::string_view kSchemaGbnf = R"(
root ::= "{" ws "\"name\"" ws ":" ws str ws "," ws "\"age\"" ws ":" ws age ws ","
         ws "\"kind\"" ws ":" ws kind ws "," ws "\"tags\"" ws ":" ws tags ws "}"
str  ::= "\"" [a-zA-Z0-9 é]{0,12} "\""
age  ::= "0" | [1-9] [0-9]{0,2}
kind ::= "\"cat\"" | "\"dog\"" | "\"catfish\""
tags ::= "[" ws ( inner ( ws "," ws inner ){0,2} )? ws "]"
inner ::= "[" ws ( age ( ws "," ws age ){0,2} )? ws "]"
ws   ::= [ \n]{0,2}
)";

void RealVocabularyWalks(const std::string& model) {
  auto vocab = testing::RealVocabulary(model);
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath(model) << " missing: run scripts/fetch_tokenizers.sh";
  ASSERT_FALSE(vocab->vocabulary().end_ids.empty());
  auto schema = CompiledGrammar::FromGbnf(kSchemaGbnf, vocab);
  for (uint32_t seed = 0; seed < 6; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(schema, seed, 400, seed < 2 ? 7 : 0, terminated);
    if (::testing::Test::HasFailure()) return;
    ASSERT_TRUE(terminated) << out;
    const auto json = nlohmann::json::parse(out);
    EXPECT_TRUE(json["name"].is_string());
    EXPECT_LE(json["age"].get<int>(), 999);
    EXPECT_TRUE(json["kind"] == "cat" || json["kind"] == "dog" || json["kind"] == "catfish");
    EXPECT_LE(json["tags"].size(), 3u);
  }
  auto json = CompiledGrammar::FromGbnf(testing::kJsonGbnf, vocab);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(json, seed, 40, 5, terminated);
    if (::testing::Test::HasFailure()) return;
    if (terminated) {
      EXPECT_TRUE(nlohmann::json::accept(out)) << out;
    }
  }
}

// Bounded repetitions (what a JSON Schema converter emits for maxLength and maxItems): the
// masks inside them are derived from the chain's largest rule plus a length filter, so they
// must still equal brute force at every count left, near the bound included.
constexpr std::string_view kBoundedGbnf = R"(
root ::= "{" ws "\"s\"" ws ":" ws str ws "," ws "\"a\"" ws ":" ws arr ws "}"
str  ::= "\"" char{0,6} "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
arr  ::= "[" ws ( item ( ws "," ws item ){0,3} )? ws "]"
item ::= "\"" [a-z]{0,4} "\"" | [0-9]{1,3}
ws   ::= [ \n]{0,2}
)";

constexpr std::string_view kBoundedLongGbnf = R"(
root ::= "{" ws "\"s\"" ws ":" ws str ws "," ws "\"a\"" ws ":" ws arr ws "}"
str  ::= "\"" char{0,64} "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
arr  ::= "[" ws ( item ( ws "," ws item ){0,7} )? ws "]"
item ::= "\"" char{0,16} "\"" | [0-9]{1,6}
ws   ::= [ \t\n]{0,20}
)";

TEST(TokenMaskTest, BoundedRepetitionsSyntheticMasksEqualBruteForce) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  auto compiled = CompiledGrammar::FromGbnf(kBoundedGbnf, vocab);
  int terminated_count = 0;
  for (uint32_t seed = 0; seed < 40; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, seed, 80, 1, terminated);
    if (HasFailure()) return;
    if (terminated) {
      ++terminated_count;
      const auto json = nlohmann::json::parse(out);
      EXPECT_LE(json["a"].size(), 4u);
    }
  }
  EXPECT_GT(terminated_count, 3);
}

// Every string of up to 3 characters over "<>abc", and an end token "</s>".
std::shared_ptr<const VocabularyIndex> AngleBracketVocab() {
  std::vector<std::string> tokens{""};
  AppendAllStrings("<>abc", 3, tokens);
  const auto end_id = static_cast<int32_t>(tokens.size());
  tokens.push_back("</s>");
  return MakeVocab(tokens, {}, {end_id});
}

// `walks` random walks of up to 12 tokens (seeds 0, 1, ...), masks against brute force after
// every step; how many ended with an end token (-1 at the first failure).
int TerminatedWalks(const std::shared_ptr<const CompiledGrammar>& compiled, uint32_t walks) {
  int terminated_count = 0;
  for (uint32_t seed = 0; seed < walks; ++seed) {
    bool terminated = false;
    RandomWalk(compiled, seed, 12, 1, terminated);
    if (::testing::Test::HasFailure()) return -1;
    terminated_count += terminated ? 1 : 0;
  }
  return terminated_count;
}

// A long bounded repetition, alone and under a star (gbnf_fuzz's `"b"{0,080300} *`, whose
// chain of rules took n^2 / 2 steps to find its top): masks after every step against brute force.
TEST(TokenMaskTest, LongRepetitionChainsMaskAsBruteForce) {
  const auto vocab = AngleBracketVocab();
  for (const char* gbnf : {"root ::= \"<\" x{0,3000} \">\"\nx ::= \"a\" | \"ab\" | \"c\"\n",
                           "root ::= \"<\" (x{0,3000})* \">\"\nx ::= \"a\" | \"bc\"\n",
                           "root ::= \"<\" \"b\"{2,3000} * \">\"\n"}) {
    SCOPED_TRACE(gbnf);
    auto compiled = CompiledGrammar::FromGbnf(gbnf, vocab);
    // The chain's rules share their top's masks, but for the last few (tokens are at most 4
    // bytes): without that, one mask per rule.
    EXPECT_LT(compiled->num_masks(), 100u);
    const int terminated_count = TerminatedWalks(compiled, 20);
    if (HasFailure()) return;
    EXPECT_GT(terminated_count, 2);
  }
}

// The matcher takes one mask for tops that are every start of one rule called at one place (a
// string's character). After "a" below, such a set (the next x) shares its frame with a top
// inside the x just begun ("a" may go on to "ab"), which must keep its own mask; in a bounded
// repetition the call's mask is a ladder of its own. Masks after every step against brute force.
TEST(TokenMaskTest, OneMaskPerCalledRuleKeepsTheOtherTopsOverItsFrame) {
  const auto vocab = AngleBracketVocab();
  for (const char* gbnf :
       {"root ::= \"<\" x* \">\"\nx ::= \"a\" | \"ab\" | \"c\" | \"ca\"\n",
        "root ::= \"<\" x{0,6} \">\"\nx ::= \"a\" | \"ab\" | \"c\" | \"ca\"\n"}) {
    SCOPED_TRACE(gbnf);
    const int terminated_count = TerminatedWalks(CompiledGrammar::FromGbnf(gbnf, vocab), 30);
    if (HasFailure()) return;
    EXPECT_GT(terminated_count, 3);
  }
}

// Inside x{0,k}, a token whose bytes force more x's than are left is rejected without a walk,
// and one made of forced x's alone that fit keeps the verdict of a larger count. Neither may
// hold where the way out of the repetition can take an x's bytes, or where the top is inside an
// x (after "\u", hex digits are one x, not four): masks after every prefix, at every count left,
// against brute force.
TEST(TokenMaskTest, ForcedRepetitionsMasksEqualBruteForceAtEveryCount) {
  std::vector<std::string> tokens;
  AppendAllStrings("a1e\"\\u,]x", 3, tokens);
  for (const char* t : {"aaaa", "aaaaa", "aaaaaaa", "1eaa", "00e9", "00e9abc", "e9a\"", "aa\",",
                        "\xC3\xA9\xC3\xA9\xC3\xA9", "a\xC3\xA9\xC3\xA9", "\\u00e9a", "abcdef",
                        "abcde]", "ab12", "aaaa1]", "\xC3\xA9"})
    tokens.emplace_back(t);
  // Tokens that end an escape and the string (undecided one frame up), enough that the walk of
  // those gives up and the count-left masks come from the larger counts' (as on a real vocab).
  for (const char* head : {"", "0", "00", "00e", "00e9", "e", "e9"}) {
    for (const char* tail : {"\"", "\",", "a\"", "a\",", "aa\"", "aa\",", "1\"", "e\","})
      tokens.push_back(std::string(head) + tail);
  }
  auto vocab = MakeVocab(tokens);
  const int64_t vocab_size = vocab->NumIds();
  struct Case {
    std::string_view gbnf;
    std::vector<std::string> prefixes;
  };
  std::vector<Case> cases;
  {
    Case c{R"(root ::= "\"" char{0,6} "\"" ","?
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))",
           {}};
    for (int i = 0; i <= 6; ++i) {
      std::string head(1, '"');
      head.append(static_cast<size_t>(i), 'a');
      c.prefixes.push_back(head);
      if (i < 6) {
        for (int j = 0; j <= 3; ++j) {
          std::string escape = head;
          escape.append("\\u").append(static_cast<size_t>(j), '0');
          c.prefixes.push_back(escape);
        }
        c.prefixes.push_back(head + "\xC3");
      }
    }
    cases.push_back(std::move(c));
  }
  // The way out takes letters too (then nothing is forced), or is a rule with a nullable start.
  cases.push_back({R"(root ::= "[" [a-z]{0,4} [a-z0-9]{0,3} "]")", {}});
  cases.push_back({R"(root ::= "[" [a-z]{0,4} tail
tail ::= [0-9]? "]")",
                   {}});

  for (size_t c = 1; c < cases.size(); ++c) {
    for (int i = 0; i <= 4; ++i) {
      std::string prefix(1, '[');
      prefix.append(static_cast<size_t>(i), 'a');
      cases[c].prefixes.push_back(prefix);
    }
  }
  // One mask per called rule (y's two starts) ends the chain at the repetition when the matcher
  // derives it from the call alone: over the unknown rest, a token forcing more y's than are
  // left is uncertain, not rejected (here the way out takes more a's).
  {
    Case c{R"(root ::= "\"" y{0,5} "a"* "]"
y ::= "a" | "x")",
           {}};
    for (int i = 0; i <= 5; ++i) {
      std::string prefix(1, '"');
      for (int j = 0; j < i; ++j) prefix.push_back(j % 2 == 0 ? 'a' : 'x');
      c.prefixes.push_back(prefix);
    }
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    // One compiled grammar per case, its masks computed in this order (larger counts first, as a
    // decode meets them, then the smaller ones derived from them).
    auto compiled = CompiledGrammar::FromGbnf(c.gbnf, vocab);
    for (const std::string& prefix : c.prefixes) {
      const auto mismatches = MismatchesAfter(compiled, prefix, vocab_size);
      ASSERT_TRUE(mismatches) << prefix;
      for (const int32_t id : *mismatches) {
        ADD_FAILURE() << c.gbnf << "\nafter '" << prefix << "': token '"
                      << tokens[static_cast<size_t>(id)] << "'";
      }
    }
  }
}

// Counts and tokens past the ladder's tables: lengths by rank are capped at 255 bytes and the
// ids by length kept up to 63, so a repetition of 300 with tokens of up to 301 bytes takes the
// long tokens one by one and the counts of 64 and more from the other side. Masks at counts
// around those bounds, the repetition's x a byte set and a rule, against brute force.
TEST(TokenMaskTest, LongTokensAndLargeCountsMasksEqualBruteForce) {
  std::vector<std::string> tokens;
  AppendAllStrings("ab\"]", 3, tokens);
  auto run_then = [](size_t len, char c, std::string_view tail) {  // (GCC 12 misreads `+`)
    std::string t(len, c);
    t.append(tail);
    return t;
  };
  for (const size_t len : {40, 62, 63, 64, 65, 100, 200, 253, 254, 255, 256, 257, 299, 300, 301}) {
    tokens.push_back(std::string(len, 'a'));
    tokens.push_back(run_then(len - 1, 'a', "\""));
    tokens.push_back(run_then(len - 2, 'b', "\"]"));
  }
  // Enough tokens that end the string that their walk gives up and the masks come from the
  // ladder (as on a real vocabulary).
  for (size_t k = 0; k < 40; ++k) tokens.push_back(run_then(k % 7, 'b', "\"]"));
  auto vocab = MakeVocab(tokens);
  const int64_t vocab_size = vocab->NumIds();
  for (const char* gbnf : {"root ::= \"\\\"\" [ab]{0,300} \"\\\"\" \"]\"",
                           "root ::= \"\\\"\" x{0,300} \"\\\"\" \"]\"\nx ::= \"a\" | \"b\""}) {
    SCOPED_TRACE(gbnf);
    auto compiled = CompiledGrammar::FromGbnf(gbnf, vocab);
    for (const int i : {0,   1,   2,   36,  37,  38,  44,  45,  46,  100, 199, 200, 235, 236,
                        237, 238, 243, 244, 245, 246, 247, 250, 260, 280, 297, 298, 299, 300}) {
      std::string prefix = "\"";
      prefix.append(static_cast<size_t>(i), 'a');
      const auto mismatches = MismatchesAfter(compiled, prefix, vocab_size);
      ASSERT_TRUE(mismatches) << i;
      for (const int32_t id : *mismatches) {
        ADD_FAILURE() << "after " << i << " a's: token of "
                      << tokens[static_cast<size_t>(id)].size() << " bytes '"
                      << tokens[static_cast<size_t>(id)].substr(0, 8) << "...'";
      }
    }
  }
}

// On a real vocabulary the masks inside a repetition come from the larger counts' (the walks
// give up): a repetition whose way out is found through the frames below it (here it may be
// empty and the frame below takes letters too, so nothing is forced), and a string's character
// (one mask per called rule, the chain ending at the call). Masks after every prefix, at every
// count left, against brute force.
TEST(TokenMaskTest, ForcedRepetitionsLlama3MasksEqualBruteForce) {
  auto vocab = testing::RealVocabulary("llama3");
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath("llama3") << " missing: run scripts/fetch_tokenizers.sh";
  const int64_t vocab_size = vocab->NumIds();
  for (const char* gbnf : {R"(root ::= "[" inner "e"* "]"
inner ::= [a-z]{0,9} [0-9]?)",
                           R"(root ::= "[" inner [a-z]* "]"
inner ::= ("-" [a-z]{0,7}){0,2} [0-9]?)",
                           R"(root ::= "\"" char{0,9} "\"" ","?
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"}) {
    SCOPED_TRACE(gbnf);
    auto compiled = CompiledGrammar::FromGbnf(gbnf, vocab);
    const char open = gbnf[10] == '[' ? '[' : '"';
    for (const char* body :
         {"", "e", "ee", "-e", "eee", "-ee", "eeee", "-e-e", "eeeeee", "eeeeeee"}) {
      const std::string prefix = std::string(1, open) + body;
      const auto mismatches = MismatchesAfter(compiled, prefix, vocab_size);
      if (HasFailure()) return;
      if (!mismatches) continue;  // the grammar rejects this prefix
      ASSERT_TRUE(mismatches->empty())
          << "after '" << prefix << "': token '"
          << vocab->vocabulary().token_bytes[mismatches->front()] << "'";
    }
  }
}

TEST(TokenMaskTest, BoundedRepetitionsLlama3MasksEqualBruteForce) {
  auto vocab = testing::RealVocabulary("llama3");
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath("llama3") << " missing: run scripts/fetch_tokenizers.sh";
  auto compiled = CompiledGrammar::FromGbnf(kBoundedLongGbnf, vocab);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, seed, 300, 2, terminated);
    if (HasFailure()) return;
    ASSERT_TRUE(terminated) << out;
    const auto json = nlohmann::json::parse(out);
    EXPECT_LE(json["a"].size(), 8u);
  }
}

// Nested bounded arrays of bounded numbers (what a schema's matrix compiles to): the context
// masks are built level by level (each chain from the chain one frame shorter, walking only the
// tokens that one left uncertain) and shared across matchers, so later walks with the same
// compiled grammar reuse masks computed by earlier ones; every mask must still equal brute force.
constexpr std::string_view kNestedArraysGbnf = R"(
root   ::= "{" ws "\"m\"" ws ":" ws outer ws "," ws "\"l\"" ws ":" ws labels ws "}"
outer  ::= "[" ws ( row ( ws "," ws row ){0,7} )? ws "]"
row    ::= "[" ws ( num ( ws "," ws num ){0,7} )? ws "]"
num    ::= "-"? ("0" | [1-9] [0-9]{0,5}) ("." [0-9]{1,4})?
labels ::= "[" ws ( str ( ws "," ws str ){0,3} )? ws "]"
str    ::= "\"" char{0,12} "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
ws     ::= [ \t\n]{0,20}
)";

void NestedArraysWalks(const std::string& model) {
  auto vocab = testing::RealVocabulary(model);
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath(model) << " missing: run scripts/fetch_tokenizers.sh";
  auto compiled = CompiledGrammar::FromGbnf(kNestedArraysGbnf, vocab);
  for (uint32_t seed = 0; seed < 3; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, 100 + seed, 150, 4, terminated);
    if (::testing::Test::HasFailure()) return;
    if (terminated) {
      const auto json = nlohmann::json::parse(out);
      EXPECT_LE(json["m"].size(), 8u);
    }
  }
  EXPECT_GT(compiled->num_context_masks(), 0u);
}

TEST(TokenMaskTest, NestedArraysLlama3MasksEqualBruteForce) { NestedArraysWalks("llama3"); }
TEST(TokenMaskTest, NestedArraysGemma3MasksEqualBruteForce) { NestedArraysWalks("gemma3"); }

// A string with minLength in the hundreds (what minLength compiles to: that many copies of the
// character rule in a row, then a bounded repetition): a copy with more copies left than any
// token has bytes shares the run's first copy's masks; the last copies each get their own. The
// masks must equal brute force all along the run, at its end and past it.
constexpr std::string_view kFixedRunGbnf = R"(
root ::= "{" ws "\"t\"" ws ":" ws "\"" char{200,230} "\"" ws "}"
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
ws   ::= [ \n]{0,2}
)";

TEST(TokenMaskTest, FixedRunLlama3MasksEqualBruteForce) {
  auto vocab = testing::RealVocabulary("llama3");
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath("llama3") << " missing: run scripts/fetch_tokenizers.sh";
  auto compiled = CompiledGrammar::FromGbnf(kFixedRunGbnf, vocab);
  for (uint32_t seed = 0; seed < 2; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, 200 + seed, 260, 3, terminated);
    if (HasFailure()) return;
    if (terminated) {
      const auto json = nlohmann::json::parse(out);
      EXPECT_GE(json["t"].get<std::string>().size(), 200u);
    }
  }
}

// Repetitions inside bounded repetitions (what the schema converter emits for an email: labels
// of at most 15 characters, at most three of them, in an array of at most three): a chain whose
// count is limited by an outer repetition is derived from one with a larger outer count, or a
// larger inner one, or from the chain one frame shorter; every mask must equal brute force.
constexpr std::string_view kNestedBoundsGbnf = R"(
root   ::= "[" (item ("," " "? item){0,2})? "]"
item   ::= "\"" email "\""
email  ::= [a-zA-Z0-9_+\x2D]{1,16} ("." [a-zA-Z0-9_+\x2D]{1,16}){0,2} "@" ([a-zA-Z0-9] [a-zA-Z0-9\x2D]{0,14} "."){1,3} [a-zA-Z]{2,6}
)";

TEST(TokenMaskTest, NestedBoundsLlama3MasksEqualBruteForce) {
  auto vocab = testing::RealVocabulary("llama3");
  if (!vocab)
    GTEST_SKIP() << testing::TokenizerPath("llama3") << " missing: run scripts/fetch_tokenizers.sh";
  auto compiled = CompiledGrammar::FromGbnf(kNestedBoundsGbnf, vocab);
  int ended = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    bool terminated = false;
    const std::string out = RandomWalk(compiled, 300 + seed, 120, 2, terminated);
    if (HasFailure()) return;
    if (terminated) {
      ++ended;
      EXPECT_LE(nlohmann::json::parse(out).size(), 3u) << out;
    }
  }
  EXPECT_GT(ended, 0);
}

TEST(TokenMaskTest, RealVocabularyLlama3) { RealVocabularyWalks("llama3"); }
TEST(TokenMaskTest, RealVocabularyQwen3) { RealVocabularyWalks("qwen3"); }
TEST(TokenMaskTest, RealVocabularyGemma3) { RealVocabularyWalks("gemma3"); }

TEST(GrammarCacheTest, HitsEvictsAndDoesNotCacheErrors) {
  auto vocab = MakeVocab({"a", "b"});
  auto other_vocab = MakeVocab({"a", "b"});
  GrammarCache cache(2);
  auto a1 = cache.GetGbnf("root ::= \"a\"", vocab);
  auto a2 = cache.GetGbnf("root ::= \"a\"", vocab);
  EXPECT_EQ(a1, a2);
  EXPECT_NE(cache.GetGbnf("root ::= \"a\"", other_vocab), a1);  // another vocabulary
  cache.GetGbnf("root ::= \"b\"", vocab);                       // evicts the oldest
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.GetGbnf("root ::= \"a\"", vocab), a1);  // a1 was least recently used
  const size_t misses = cache.misses();
  EXPECT_THROW(cache.GetGbnf("root ::= undefined", vocab), GrammarError);
  EXPECT_THROW(cache.GetGbnf("root ::= undefined", vocab), GrammarError);
  EXPECT_EQ(cache.misses(), misses + 2);  // the error was not cached
  EXPECT_LE(cache.size(), 2u);
}

TEST(GrammarCacheTest, ByteBudgetEvictsLeastRecentlyUsedAndCountsGrowth) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  auto compile = [&] { return CompiledGrammar::FromGbnf(testing::kJsonGbnf, vocab); };
  // Context masks computed while matching count toward a compiled grammar's bytes.
  GrammarCache unbounded(8);
  auto json = unbounded.Get("json", vocab, compile);
  const size_t fresh = json->MemoryBytes();
  EXPECT_GT(fresh, 0u);
  {
    GrammarMatcher m(json);
    std::vector<uint32_t> bits(GrammarMatcher::BitmaskWords(vocab->NumIds()));
    for (const char c : std::string("{\"ab\": [1, \"x\", {\"c\": null}]}")) {
      m.FillNextTokenBitmask(bits);
      ASSERT_TRUE(m.AcceptString(std::string(1, c)));
    }
  }
  ASSERT_GT(json->num_context_masks(), 0u);
  EXPECT_GT(json->MemoryBytes(), fresh);
  EXPECT_EQ(unbounded.bytes(), json->MemoryBytes());
  // A budget that holds one fresh grammar but not that one grown: the next schema evicts it.
  GrammarCache cache(8, fresh + fresh / 2);
  auto grown = cache.Get("a", vocab, [&] { return json; });
  auto b = cache.Get("b", vocab, compile);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Get("b", vocab, compile), b);      // kept: the most recent one
  EXPECT_NE(cache.Get("a", vocab, compile), grown);  // evicted: compiled anew
  // Under the budget, both stay.
  GrammarCache roomy(8, 64 * fresh);
  auto c1 = roomy.Get("c", vocab, compile);
  auto d1 = roomy.Get("d", vocab, compile);
  EXPECT_EQ(roomy.size(), 2u);
  EXPECT_EQ(roomy.Get("c", vocab, compile), c1);
  EXPECT_EQ(roomy.Get("d", vocab, compile), d1);
}

TEST(GrammarCacheTest, ConcurrentRequestsShareOneCompile) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  GrammarCache cache(4);
  std::atomic<int> compiles{0};
  std::vector<std::shared_ptr<const CompiledGrammar>> results(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      results[t] = cache.Get("json", vocab, [&] {
        ++compiles;
        return CompiledGrammar::FromGbnf(testing::kJsonGbnf, vocab);
      });
      // Matchers over one shared compiled grammar, in parallel.
      GrammarMatcher m(results[t]);
      EXPECT_TRUE(m.AcceptString("{\"a\": [1, 2]}"));
      std::vector<uint32_t> bits(GrammarMatcher::BitmaskWords(vocab->NumIds()));
      m.FillNextTokenBitmask(bits);
      EXPECT_TRUE(Bit(bits, end_id));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(compiles.load(), 1);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
}

// Matchers of one fresh compiled grammar in parallel, each inside a bounded string at another
// count: the context, ladder and forced-repetition masks are derived concurrently (TSan checks
// the locking) and each equals brute force.
TEST(GrammarCacheTest, ConcurrentMatchersDeriveBoundedMasksAlike) {
  int32_t end_id, special_id;
  auto vocab = SmallJsonVocab(end_id, special_id);
  const int64_t vocab_size = vocab->NumIds();
  auto compiled = CompiledGrammar::FromGbnf(kBoundedGbnf, vocab);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(7, -1);
  for (int t = 0; t < 7; ++t) {
    threads.emplace_back([&, t] {
      std::string prefix = "{\"s\":\"";
      prefix.append(static_cast<size_t>(t), 'a');
      const auto ids = MismatchesAfter(compiled, prefix, vocab_size);
      if (ids) mismatches[static_cast<size_t>(t)] = static_cast<int>(ids->size());
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 7; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << t << " a's";
}

}  // namespace
}  // namespace infer::grammar
