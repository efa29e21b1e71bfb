// libFuzzer target for the GBNF grammar parser (a grammar is text from a stranger's request):
// the input is a grammar; when it compiles, a short random walk over a small byte vocabulary
// (all single bytes and a few multi-byte pieces), seeded by the input, checks that every token
// the mask allows is accepted. GrammarError is an expected outcome; a crash, a sanitizer report,
// a hang (libFuzzer's -timeout) or memory beyond -rss_limit_mb is a finding.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/token_mask.h"

namespace {

std::shared_ptr<const infer::grammar::VocabularyIndex> FuzzVocabulary() {
  infer::grammar::Vocabulary vocab;
  for (int b = 0; b < 256; ++b) vocab.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"ab", "abc", "\"", "\":", "{\"", "\xE2\x82", "\xE2\x82\xAC", "true",
                            " ", "  ", "\n", "[1,", "0.5", "\\u00", "x\xC3"})
    vocab.token_bytes.push_back(piece);
  vocab.end_ids.push_back(static_cast<int32_t>(vocab.token_bytes.size()));
  vocab.token_bytes.push_back("");
  return std::make_shared<const infer::grammar::VocabularyIndex>(std::move(vocab));
}

// A short random walk: every token the mask allows must be accepted.
void Walk(const std::shared_ptr<const infer::grammar::CompiledGrammar>& compiled,
          const infer::grammar::VocabularyIndex& vocabulary, const uint8_t* data, size_t size) {
  const auto* vocab = &vocabulary;
  infer::grammar::GrammarMatcher matcher(compiled);
  std::vector<uint32_t> bits(infer::grammar::GrammarMatcher::BitmaskWords(vocab->NumIds()));
  uint32_t seed = static_cast<uint32_t>(size);
  for (size_t i = 0; i < size; ++i) seed = seed * 31 + data[i];
  for (int step = 0; step < 16 && !matcher.IsTerminated(); ++step) {
    matcher.FillNextTokenBitmask(bits);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->NumIds(); ++id) {
      if ((bits[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    seed = seed * 1664525u + 1013904223u;
    const int32_t id = allowed[seed % allowed.size()];
    if (!matcher.AcceptToken(id)) __builtin_trap();  // the mask allowed it
    (void)matcher.JumpForwardString();
  }
  if (matcher.NumAcceptedTokens() > 0) matcher.Rollback(1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vocab = FuzzVocabulary();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const infer::grammar::CompiledGrammar> compiled;
  try {
    compiled = infer::grammar::CompiledGrammar::FromGbnf(text, vocab);
  } catch (const infer::Error&) {
    return 0;
  }
  try {
    Walk(compiled, *vocab, data, size);
  } catch (const infer::GrammarError&) {
    // A grammar too ambiguous to match (Stepper::kMaxClosure): refused, as it should be.
  }
  return 0;
}
