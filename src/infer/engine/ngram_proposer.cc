#include "infer/engine/ngram_proposer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "infer/core/error.h"

namespace infer {

namespace {

// A bound on the draft: verification runs 1 + num_speculative_tokens rows per request.
constexpr int64_t kMaxSpeculativeTokens = 32;
constexpr int64_t kMaxLookup = 64;
constexpr int64_t kDefaultLookup = 5;  // vLLM's, when neither bound is given

int64_t ReadCount(const nlohmann::json& value, std::string_view key, std::string_view name) {
  INFER_CHECK(value.is_number_integer(), "{}: {} must be an integer, got {}", name, key,
              value.dump());
  return value.get<int64_t>();
}

}  // namespace

void SpeculativeConfig::Validate(std::string_view name) const {
  INFER_CHECK(num_speculative_tokens >= 0 && num_speculative_tokens <= kMaxSpeculativeTokens,
              "{}: num_speculative_tokens must be in [0, {}], got {}", name, kMaxSpeculativeTokens,
              num_speculative_tokens);
  if (!enabled()) return;
  INFER_CHECK(prompt_lookup_min >= 1 && prompt_lookup_min <= kMaxLookup,
              "{}: prompt_lookup_min must be in [1, {}], got {}", name, kMaxLookup,
              prompt_lookup_min);
  INFER_CHECK(prompt_lookup_max >= prompt_lookup_min && prompt_lookup_max <= kMaxLookup,
              "{}: prompt_lookup_max must be in [prompt_lookup_min ({}), {}], got "
              "{}",
              name, prompt_lookup_min, kMaxLookup, prompt_lookup_max);
}

SpeculativeConfig ParseSpeculativeConfig(std::string_view json, std::string_view name) {
  const nlohmann::json object = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  INFER_CHECK(object.is_object(), "{} must be a JSON object, got '{}'", name, json);
  SpeculativeConfig config;
  bool has_method = false;
  bool has_count = false;
  for (const auto& [key, value] : object.items()) {
    if (key == "method") {
      INFER_CHECK(value == "ngram",
                  "{}: method {} is not supported (supported: \"ngram\"; infer "
                  "has no draft models)",
                  name, value.dump());
      has_method = true;
    } else if (key == "num_speculative_tokens") {
      config.num_speculative_tokens = ReadCount(value, key, name);
      has_count = true;
    } else if (key == "prompt_lookup_min") {
      config.prompt_lookup_min = ReadCount(value, key, name);
    } else if (key == "prompt_lookup_max") {
      config.prompt_lookup_max = ReadCount(value, key, name);
    } else {
      Fail(
          "{}: unknown key '{}' (supported: method, num_speculative_tokens, "
          "prompt_lookup_min, prompt_lookup_max)",
          name, key);
    }
  }
  INFER_CHECK(has_method, "{}: method is required (\"ngram\")", name);
  INFER_CHECK(has_count, "{}: num_speculative_tokens is required", name);
  INFER_CHECK(
      config.num_speculative_tokens >= 1 && config.num_speculative_tokens <= kMaxSpeculativeTokens,
      "{}: num_speculative_tokens must be in [1, {}], got {}", name, kMaxSpeculativeTokens,
      config.num_speculative_tokens);
  if (!object.contains("prompt_lookup_min") && !object.contains("prompt_lookup_max")) {
    config.prompt_lookup_min = config.prompt_lookup_max = kDefaultLookup;
  } else if (!object.contains("prompt_lookup_min")) {
    config.prompt_lookup_min = config.prompt_lookup_max;
  } else if (!object.contains("prompt_lookup_max")) {
    config.prompt_lookup_max = config.prompt_lookup_min;
  }
  config.Validate(name);
  return config;
}

std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> tokens,
                                       const SpeculativeConfig& config, int64_t max_tokens) {
  const int64_t want = std::min(config.num_speculative_tokens, max_tokens);
  const auto size = static_cast<int64_t>(tokens.size());
  if (want <= 0) return {};
  for (int64_t n = std::min(config.prompt_lookup_max, size - 1); n >= config.prompt_lookup_min;
       --n) {
    const auto suffix = tokens.last(static_cast<size_t>(n));
    // Occurrences start at most at size - n - 1, so at least one token follows each. Latest
    // first; the earliest one seen is kept in case none has a whole draft after it.
    int64_t found = -1;
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (tokens[static_cast<size_t>(start)] != suffix.front() ||
          !std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) {
        continue;
      }
      found = start;
      if (size - (start + n) >= want) break;
    }
    if (found < 0) continue;
    const int64_t begin = found + n;
    const int64_t end = std::min(size, begin + want);
    return {tokens.begin() + begin, tokens.begin() + end};
  }
  return {};
}

}  // namespace infer
