// Tiny models (the fixtures' shapes) with the real Llama 3 or Qwen3 vocabulary and tokenizer
// files, for --load-format dummy runs that need text: string prompts, stop strings, chat,
// reasoning tags.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "unit/loader/test_util.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace infer::testing {

// A fixture's tiny shapes (models/FIXTURE) with a real vocabulary: `tokenizer`'s files from
// .cache/tokenizers and `config` merged over the fixture's config.json.
class RealVocabModelDir {
 public:
  RealVocabModelDir(const std::string& fixture, const std::string& tokenizer,
                    const nlohmann::json& overrides) {
    nlohmann::json config;
    std::ifstream(FixturePath("models/" + fixture + "/model/config.json")) >> config;
    config.update(overrides);
    WriteFile(dir_.path() / "config.json", config.dump());
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(RealTokenizerDir(tokenizer) / name, dir_.path() / name);
    }
  }
  std::string path() const { return dir_.path().string(); }

 protected:
  TempDir dir_;
};

class Llama3VocabModelDir : public RealVocabModelDir {
 public:
  Llama3VocabModelDir()
      : RealVocabModelDir("llama", "llama3",
                          {{"vocab_size", 128256},
                           {"bos_token_id", 128000},
                           {"eos_token_id", nlohmann::json::array({128001, 128008, 128009})}}) {
    std::filesystem::copy_file(FixturePath("configs/Llama-3.2-1B-Instruct/generation_config.json"),
                               dir_.path() / "generation_config.json");
  }
};

// Qwen3's vocabulary (<think> and </think> among its added tokens).
class Qwen3VocabModelDir : public RealVocabModelDir {
 public:
  Qwen3VocabModelDir()
      : RealVocabModelDir("qwen3", "qwen3",
                          {{"vocab_size", 151936},
                           {"bos_token_id", 151643},
                           {"eos_token_id", nlohmann::json::array({151645, 151643})}}) {}
};

}  // namespace infer::testing
