// libFuzzer target for the tokenizer: random bytes -> encode (all three real tokenizers), random
// ids -> decode and streaming detokenize (pieces must concatenate to the full decode), random
// bytes -> chat-template parse and render. infer::Error is an expected outcome; anything else
// (crash, sanitizer report, broken invariant) is a finding.
//
// Needs the real tokenizers: $INFER_TOKENIZERS_DIR, else .cache/tokenizers under the source dir
// (or the working directory) as scripts/fetch_tokenizers.sh lays them out.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "infer/core/error.h"
#include "infer/tokenizer/detokenizer.h"
#include "infer/tokenizer/jinja/interpreter.h"
#include "infer/tokenizer/tokenizer.h"
#include "infer/tokenizer/utf8.h"

namespace {

std::vector<std::unique_ptr<infer::Tokenizer>>& Tokenizers() {
  static std::vector<std::unique_ptr<infer::Tokenizer>> tokenizers;
  return tokenizers;
}

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

void FuzzEncode(const infer::Tokenizer& tokenizer, bool lossless, std::string_view text) {
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.Encode(text, text.size() % 2 == 0);
  } catch (const infer::Error&) {
    Check(!infer::IsValidUtf8(text), "Encode rejected valid UTF-8");
    return;
  }
  Check(infer::IsValidUtf8(text), "Encode accepted invalid UTF-8");
  Check(infer::IsValidUtf8(tokenizer.Decode(ids, true)), "Decode produced invalid UTF-8");
  if (lossless) {
    Check(tokenizer.Decode(tokenizer.Encode(text, false), false) == text,
          "byte-level round trip changed the text");
  }
}

void FuzzDecode(const infer::Tokenizer& tokenizer, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  const int32_t range = tokenizer.VocabSize() + 8;
  for (size_t i = 0; i + 3 < size; i += 4) {
    uint32_t raw;
    std::memcpy(&raw, data + i, 4);
    // Mostly low ids and byte tokens (where decoding is subtle), sometimes any id.
    ids.push_back(static_cast<int32_t>(raw % (raw & 0x80000000u ? range : 512u)));
  }
  for (bool skip : {false, true}) {
    const std::string full = tokenizer.Decode(ids, skip);
    Check(infer::IsValidUtf8(full), "Decode produced invalid UTF-8");
    infer::IncrementalDetokenizer detokenizer(tokenizer, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += detokenizer.Add(id);
    streamed += detokenizer.Finish();
    Check(streamed == full, "streamed pieces differ from Decode");
  }
}

void FuzzTemplate(std::string_view source) {
  if (!infer::IsValidUtf8(source)) return;
  try {
    infer::jinja::Template chat_template(source);
    infer::jinja::ValueDict context = {
        {"messages",
         infer::jinja::Value(infer::jinja::ValueList{infer::jinja::Value(infer::jinja::ValueDict{
             {"role", infer::jinja::Value("user")}, {"content", infer::jinja::Value("hi")}})})},
        {"add_generation_prompt", infer::jinja::Value(true)}};
    chat_template.Render(context);
  } catch (const infer::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("INFER_TOKENIZERS_DIR");
#ifdef INFER_SOURCE_DIR
  const std::string fallback = std::string(INFER_SOURCE_DIR) + "/.cache/tokenizers";
#else
  const std::string fallback = ".cache/tokenizers";  // scripts/fuzz.sh runs from the repo root
#endif
  const std::string dir = env ? env : fallback;
  for (const char* model : {"llama3", "qwen3", "gemma3"}) {
    try {
      Tokenizers().push_back(infer::Tokenizer::FromFile(dir + "/" + model + "/tokenizer.json"));
    } catch (const infer::Error& e) {
      std::fprintf(stderr, "tokenizer_fuzz: %s (run scripts/fetch_tokenizers.sh)\n", e.what());
      std::exit(1);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t model = selector % 3;  // 0: llama3 (byte-level, no normalizer: lossless)
  switch ((selector / 3) % 4) {
    case 0:
    case 1:
      FuzzEncode(*Tokenizers()[model], model == 0, rest);
      break;
    case 2:
      FuzzDecode(*Tokenizers()[model], data + 1, size - 1);
      break;
    default:
      FuzzTemplate(rest);
      break;
  }
  return 0;
}
