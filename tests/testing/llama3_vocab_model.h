// A tiny Llama (the fixture's shapes) with the real Llama 3 vocabulary and tokenizer files, for
// --load-format dummy runs that need text: string prompts, stop strings, chat.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "unit/loader/test_util.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace infer::testing {

class Llama3VocabModelDir {
 public:
  Llama3VocabModelDir() {
    nlohmann::json config;
    std::ifstream(FixturePath("models/llama/model/config.json")) >> config;
    config["vocab_size"] = 128256;
    config["bos_token_id"] = 128000;
    config["eos_token_id"] = nlohmann::json::array({128001, 128008, 128009});
    WriteFile(dir_.path() / "config.json", config.dump());
    const auto tokenizer = RealTokenizerDir("llama3");
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(tokenizer / name, dir_.path() / name);
    }
    std::filesystem::copy_file(FixturePath("configs/Llama-3.2-1B-Instruct/generation_config.json"),
                               dir_.path() / "generation_config.json");
  }
  std::string path() const { return dir_.path().string(); }

 private:
  TempDir dir_;
};

}  // namespace infer::testing
