// Grammar engine benchmark: per-token cost of constrained decoding (FillNextTokenBitmask +
// AcceptToken) on random walks (each step picks uniformly among the allowed tokens, the
// hardest case: random weights at temperature 1), mean and p99 in microseconds, plus grammar
// compile time, for a JSON grammar and schema-like grammars on real vocabularies (llama3 128k,
// gemma3 262k). Prints a markdown table; --json writes the report. Single thread.
#include <algorithm>
#include <bit>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/grammar/token_mask.h"
#include "infer/tokenizer/tokenizer.h"
#include "infer/tokenizer/vocabulary_bytes.h"

namespace {

using Clock = std::chrono::steady_clock;
using infer::grammar::CompiledGrammar;
using infer::grammar::GrammarMatcher;
using infer::grammar::Vocabulary;
using infer::grammar::VocabularyIndex;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct NamedGrammar {
  const char* name;
  const char* gbnf;
};

// Schema-like grammars shaped as a JSON Schema converter emits them (bounded whitespace and
// string lengths, as llama.cpp's converter bounds them).
const NamedGrammar kGrammars[] = {
    {"json", R"(root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws member ( ws "," ws member )* ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex )
hex    ::= [0-9a-fA-F]
number ::= "-"? int frac? exp?
int    ::= "0" | [1-9] [0-9]*
frac   ::= "." [0-9]+
exp    ::= [eE] [+-]? [0-9]+
ws     ::= [ \t\n\r]*
)"},
    {"object_fixed_keys",
     R"(root ::= "{" ws "\"id\"" ws ":" ws int ws "," ws "\"name\"" ws ":" ws str ws "," ws "\"email\"" ws ":" ws str ws "," ws "\"active\"" ws ":" ws bool ws "}"
int  ::= "-"? ("0" | [1-9] [0-9]{0,15})
str  ::= "\"" char{0,64} "\""
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
bool ::= "true" | "false"
ws   ::= [ \t\n]{0,20}
)"},
    {"enum_strings",
     R"(root ::= "{" ws "\"color\"" ws ":" ws color ws "," ws "\"size\"" ws ":" ws size ws "}"
color ::= "\"red\"" | "\"green\"" | "\"blue\"" | "\"light blue\"" | "\"dark green\"" | "\"purple\""
size  ::= "\"small\"" | "\"medium\"" | "\"large\"" | "\"extra large\""
ws   ::= [ \t\n]{0,20}
)"},
    {"bounded_numbers",
     R"(root ::= "{" ws "\"lat\"" ws ":" ws num ws "," ws "\"lon\"" ws ":" ws num ws "," ws "\"count\"" ws ":" ws count ws "}"
num   ::= "-"? ("0" | [1-9] [0-9]{0,2}) ("." [0-9]{1,6})?
count ::= "0" | [1-9] [0-9]{0,5}
ws   ::= [ \t\n]{0,20}
)"},
    {"nested_arrays",
     R"(root ::= "{" ws "\"matrix\"" ws ":" ws outer ws "," ws "\"labels\"" ws ":" ws labels ws "}"
outer  ::= "[" ws ( row ( ws "," ws row ){0,7} )? ws "]"
row    ::= "[" ws ( num ( ws "," ws num ){0,7} )? ws "]"
num    ::= "-"? ("0" | [1-9] [0-9]{0,5}) ("." [0-9]{1,4})?
labels ::= "[" ws ( str ( ws "," ws str ){0,9} )? ws "]"
str    ::= "\"" char{0,32} "\""
char   ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
ws     ::= [ \t\n]{0,20}
)"},
};

std::string CpuName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"infer grammar benchmark"};
  std::string tokenizers_dir = ".cache/tokenizers";
  std::vector<std::string> models = {"llama3", "gemma3"};
  int tokens_per_grammar = 3000;
  int max_walk = 300;
  std::string json_path;
  app.add_option("--tokenizers-dir", tokenizers_dir, "folder with <model>/tokenizer.json");
  app.add_option("--models", models, "model keys");
  app.add_option("--tokens", tokens_per_grammar, "timed tokens per grammar and model");
  app.add_option("--max-walk", max_walk, "longest random walk, in tokens");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json report;
    report["benchmark"] = "grammar_mask";
    report["cpu"] = CpuName();
    report["threads"] = 1;
    report["command"] = "grammar_bench --tokens " + std::to_string(tokens_per_grammar);
    report["results"] = nlohmann::json::array();
    fmt::print(
        "| model | grammar | compile ms | tokens | mean us | p50 us | p99 us | max us | "
        "walks ended |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& model : models) {
      const auto path = std::filesystem::path(tokenizers_dir) / model / "tokenizer.json";
      auto tokenizer = infer::Tokenizer::FromFile(path);
      auto start = Clock::now();
      Vocabulary vocab;
      vocab.token_bytes = infer::TokenBytes(*tokenizer);
      vocab.special_ids = infer::SpecialTokenIds(*tokenizer);
      for (const char* eos : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<eos>"}) {
        if (auto id = tokenizer->TokenToId(eos)) vocab.end_ids.push_back(*id);
      }
      const int64_t vocab_size = tokenizer->VocabSize();
      auto index = std::make_shared<const VocabularyIndex>(std::move(vocab));
      const double index_ms = MsSince(start);
      fmt::print("<!-- {}: vocabulary {} ids, index built in {:.1f} ms -->\n", model, vocab_size,
                 index_ms);
      for (const NamedGrammar& grammar : kGrammars) {
        start = Clock::now();
        auto compiled = CompiledGrammar::FromGbnf(grammar.gbnf, index);
        const double compile_ms = MsSince(start);
        // Pass 0 ("cold") starts from the fresh compiled grammar, so it pays for the context
        // masks computed on first use; pass 1 ("warm") walks again with other seeds on the same
        // compiled grammar, as later requests with a cached grammar do.
        for (int pass = 0; pass < 2; ++pass) {
          std::vector<double> us;
          std::vector<uint32_t> bits(GrammarMatcher::BitmaskWords(vocab_size));
          std::vector<int32_t> allowed;
          std::mt19937 rng(2026 + pass);
          int walks = 0, ended = 0;
          while (static_cast<int>(us.size()) < tokens_per_grammar) {
            GrammarMatcher matcher(compiled);
            ++walks;
            for (int step = 0; step < max_walk; ++step) {
              const auto t0 = Clock::now();
              matcher.FillNextTokenBitmask(bits);
              const auto t1 = Clock::now();
              allowed.clear();
              for (size_t w = 0; w < bits.size(); ++w) {
                for (uint32_t word = bits[w]; word != 0; word &= word - 1)
                  allowed.push_back(static_cast<int32_t>(w * 32 + std::countr_zero(word)));
              }
              INFER_CHECK(!allowed.empty(), "{} on {}: no token allowed", grammar.name, model);
              const int32_t id = allowed[rng() % allowed.size()];
              const auto t2 = Clock::now();
              INFER_CHECK(matcher.AcceptToken(id), "{}: allowed token {} refused", grammar.name,
                          id);
              const auto t3 = Clock::now();
              us.push_back(
                  std::chrono::duration<double, std::micro>((t1 - t0) + (t3 - t2)).count());
              if (matcher.IsTerminated()) {
                ++ended;
                break;
              }
            }
          }
          std::vector<double> sorted = us;
          std::sort(sorted.begin(), sorted.end());
          double mean = 0;
          for (double v : us) mean += v;
          mean /= static_cast<double>(us.size());
          const double p50 = sorted[sorted.size() / 2];
          const double p99 = sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
          fmt::print("| {} | {} ({}) | {:.1f} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {}/{} |\n",
                     model, grammar.name, pass == 0 ? "cold" : "warm", compile_ms, us.size(), mean,
                     p50, p99, sorted.back(), ended, walks);
          report["results"].push_back({{"model", model},
                                       {"vocab_size", vocab_size},
                                       {"index_ms", index_ms},
                                       {"grammar", grammar.name},
                                       {"pass", pass == 0 ? "cold" : "warm"},
                                       {"compile_ms", compile_ms},
                                       {"positions", compiled->num_positions()},
                                       {"precomputed_masks", compiled->num_masks()},
                                       {"uncertain_ranks", compiled->num_uncertain()},
                                       {"context_masks", compiled->num_context_masks()},
                                       {"tokens", us.size()},
                                       {"mean_us", mean},
                                       {"p50_us", p50},
                                       {"p99_us", p99},
                                       {"max_us", sorted.back()},
                                       {"walks", walks},
                                       {"walks_ended", ended}});
        }
      }
    }
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << report.dump(2) << "\n";
    }
  } catch (const infer::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
