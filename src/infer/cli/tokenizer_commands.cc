// `infer tokenize`, `infer detokenize`, `infer chat-template`: JSON lines in, JSON lines out
// (DESIGN.md contracts), for checking the tokenizer and chat templates against Hugging Face.
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/cli/model_tokenizer.h"
#include "infer/core/error.h"
#include "infer/loader/model_path.h"
#include "infer/tokenizer/chat_template.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer::cli {
namespace {

struct TokenizerArgs {
  std::string model;
  std::string input_jsonl;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
};

// Calls `handle` for each non-empty line of FILE ("-" reads stdin) parsed as a JSON object and
// prints what it returns as one line.
void ForEachJsonLine(
    const std::string& path,
    const std::function<nlohmann::ordered_json(const nlohmann::ordered_json&, size_t)>& handle) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    INFER_CHECK(file.good(), "cannot open --input-jsonl {}", path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::ordered_json input;
    try {
      input = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      Fail("{} line {}: invalid JSON: {}", path, line_number, e.what());
    }
    INFER_CHECK(input.is_object(), "{} line {}: expected a JSON object", path, line_number);
    const std::string out =
        handle(input, line_number).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
  }
  INFER_CHECK(!in.bad(), "error reading {}", path);
  std::fflush(stdout);
}

// The model's tokenizer (tokenizer.json, or a GGUF file's metadata); an error when it has none.
std::unique_ptr<Tokenizer> ModelTokenizer(const std::string& model) {
  auto tokenizer = LoadModelTokenizer(ResolveModelPath(model));
  INFER_CHECK(tokenizer != nullptr,
              "model {} has no tokenizer (no tokenizer.json, no GGUF tokenizer metadata)", model);
  return tokenizer;
}

void RunTokenize(const TokenizerArgs& args) {
  auto tokenizer = ModelTokenizer(args.model);
  ForEachJsonLine(args.input_jsonl, [&](const nlohmann::ordered_json& input, size_t line) {
    INFER_CHECK(input.contains("text") && input["text"].is_string(),
                "{} line {}: expected {{\"text\": \"...\"}}", args.input_jsonl, line);
    const std::string& text = input["text"].get_ref<const std::string&>();
    return nlohmann::ordered_json{{"ids", tokenizer->Encode(text, args.add_special_tokens)}};
  });
}

void RunDetokenize(const TokenizerArgs& args) {
  auto tokenizer = ModelTokenizer(args.model);
  ForEachJsonLine(args.input_jsonl, [&](const nlohmann::ordered_json& input, size_t line) {
    INFER_CHECK(input.contains("ids") && input["ids"].is_array(),
                "{} line {}: expected {{\"ids\": [...]}}", args.input_jsonl, line);
    std::vector<int32_t> ids;
    for (const auto& id : input["ids"]) {
      INFER_CHECK(
          id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX,
          "{} line {}: ids must be non-negative integers", args.input_jsonl, line);
      ids.push_back(id.get<int32_t>());
    }
    return nlohmann::ordered_json{{"text", tokenizer->Decode(ids, args.skip_special_tokens)}};
  });
}

void RunChatTemplate(const TokenizerArgs& args) {
  auto chat_template = LoadModelChatTemplate(ResolveModelPath(args.model));
  ForEachJsonLine(args.input_jsonl, [&](const nlohmann::ordered_json& input, size_t line) {
    INFER_CHECK(input.contains("messages") && input["messages"].is_array(),
                "{} line {}: expected {{\"messages\": [...], \"options\": {{...}}}}",
                args.input_jsonl, line);
    const nlohmann::ordered_json options =
        input.contains("options") ? input["options"] : nlohmann::ordered_json::object();
    INFER_CHECK(options.is_object() || options.is_null(), "{} line {}: options must be an object",
                args.input_jsonl, line);
    try {
      return nlohmann::ordered_json{{"text", chat_template->Render(input["messages"], options)}};
    } catch (const Error& e) {
      // The template raised (raise_exception, undefined value, type error): report, go on.
      return nlohmann::ordered_json{{"error", e.what()}};
    }
  });
}

}  // namespace

void AddTokenizerCommands(CLI::App& app) {
  auto args = std::make_shared<TokenizerArgs>();
  const auto add_common = [&](CLI::App* command) {
    command->add_option("--model", args->model, "model folder or Hugging Face id")->required();
    command->add_option("--input-jsonl", args->input_jsonl, "JSON lines input file ('-': stdin)")
        ->required();
  };

  CLI::App* tokenize =
      app.add_subcommand("tokenize", "Encode {\"text\"} JSON lines to {\"ids\"} lines");
  add_common(tokenize);
  tokenize->add_flag("--add-special-tokens", args->add_special_tokens,
                     "add BOS etc. as the tokenizer's post-processor says");
  tokenize->callback([args] { RunTokenize(*args); });

  CLI::App* detokenize =
      app.add_subcommand("detokenize", "Decode {\"ids\"} JSON lines to {\"text\"} lines");
  add_common(detokenize);
  detokenize->add_flag("--skip-special-tokens", args->skip_special_tokens,
                       "drop special tokens from the text");
  detokenize->callback([args] { RunDetokenize(*args); });

  CLI::App* chat = app.add_subcommand(
      "chat-template",
      "Render {\"messages\", \"options\"} JSON lines with the model's chat template");
  add_common(chat);
  chat->callback([args] { RunChatTemplate(*args); });
}

}  // namespace infer::cli
