// Grammar engine benchmark: per-token cost of constrained decoding (FillNextTokenBitmask +
// AcceptToken) on random walks (each step picks uniformly among the allowed tokens, the
// hardest case: random weights at temperature 1), mean and p99 in microseconds, plus grammar
// compile time, for a JSON grammar and schema-like grammars on real vocabularies (llama3 128k,
// gemma3 262k), then for JSON schemas as clients send them, compiled by the schema compiler
// (json_schema.h) as the server compiles them: every schema of benchmarks/structured_validity.py's
// set (tests/fixtures/grammar/schemas) and stress shapes (deep nesting, anyOf of objects, $ref
// recursion, strings bounded in the thousands, 8x8 matrices, a large enum, json_object). Also
// times the vocabulary's byte index (TokenBytes, then VocabularyIndex) that the first
// structured request builds. Prints a markdown table; --json writes the report. Single thread.
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
#include "infer/grammar/json_schema.h"
#include "infer/grammar/structured_output.h"
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
  std::string name;
  std::string gbnf;
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

// JSON schemas that stress the mask, of the kinds clients send (compiled by JsonSchemaToGbnf).
const NamedGrammar kStressSchemas[] = {
    // eight levels of objects, each with a bounded string and an integer
    {"deep_nesting", R"({"$defs": {"leaf": {"type": "object", "properties": {"name": {"type":
      "string", "maxLength": 16}, "n": {"type": "integer", "minimum": 0, "maximum": 999}},
      "required": ["name", "n"], "additionalProperties": false}},
      "type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type":
      "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "object",
      "properties": {"e": {"type": "object", "properties": {"f": {"type": "object",
      "properties": {"g": {"type": "object", "properties": {"h": {"$ref": "#/$defs/leaf"},
      "s": {"type": "string", "maxLength": 8}}, "required": ["h", "s"],
      "additionalProperties": false}}, "required": ["g"], "additionalProperties": false}},
      "required": ["f"], "additionalProperties": false}}, "required": ["e"],
      "additionalProperties": false}}, "required": ["d"], "additionalProperties": false}},
      "required": ["c"], "additionalProperties": false}}, "required": ["b"],
      "additionalProperties": false}}, "required": ["a"], "additionalProperties": false})"},
    // an array of a union of three object shapes
    {"any_of_objects", R"({"type": "array", "maxItems": 6, "items": {"anyOf": [
      {"type": "object", "properties": {"kind": {"const": "user"}, "name": {"type": "string",
       "maxLength": 32}, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
       "required": ["kind", "name"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "number",
       "minimum": -1000, "maximum": 1000}, "y": {"type": "number", "minimum": -1000,
       "maximum": 1000}}, "required": ["kind", "x", "y"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "tags"}, "tags": {"type": "array",
       "maxItems": 5, "items": {"type": "string", "maxLength": 12}}},
       "required": ["kind", "tags"], "additionalProperties": false}]}})"},
    // $ref recursion: a tree
    {"ref_recursive_tree", R"({"$defs": {"node": {"type": "object", "properties": {
      "label": {"type": "string", "maxLength": 20}, "weight": {"type": "number", "minimum": 0,
      "maximum": 1}, "children": {"type": "array", "maxItems": 3, "items": {"$ref":
      "#/$defs/node"}}}, "required": ["label", "children"], "additionalProperties": false}},
      "$ref": "#/$defs/node"})"},
    // strings bounded in the thousands (a summary field, a document)
    {"bounded_string_4000", R"({"type": "object", "properties": {"text": {"type": "string",
      "maxLength": 4000}}, "required": ["text"], "additionalProperties": false})"},
    {"string_2000_to_4000", R"({"type": "object", "properties": {"title": {"type": "string",
      "maxLength": 100}, "body": {"type": "string", "minLength": 2000, "maxLength": 4000}},
      "required": ["title", "body"], "additionalProperties": false})"},
    // nested bounded arrays of bounded numbers
    {"matrix_8x8", R"({"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 8,
      "items": {"type": "array", "maxItems": 8, "items": {"type": "number", "minimum": -1000,
      "maximum": 1000}}}, "labels": {"type": "array", "maxItems": 10, "items": {"type":
      "string", "maxLength": 32}}}, "required": ["matrix", "labels"],
      "additionalProperties": false})"},
};

// A string enum of `n` values (a country list, product SKUs).
std::string LargeEnumSchema(int n) {
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) values.push_back(fmt::format("item-{:04d}-{}", i, i * 7919 % 1000));
  return nlohmann::ordered_json{{"type", "object"},
                                {"properties", {{"sku", {{"enum", values}}}}},
                                {"required", {"sku"}},
                                {"additionalProperties", false}}
      .dump();
}

// The grammars to run: the GBNF ones above, then every schema of `schemas_dir`, then the stress
// schemas and json_object.
std::vector<NamedGrammar> AllGrammars(const std::string& schemas_dir) {
  std::vector<NamedGrammar> out(std::begin(kGrammars), std::end(kGrammars));
  if (!schemas_dir.empty() && std::filesystem::is_directory(schemas_dir)) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(schemas_dir)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::ifstream in(file);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      out.push_back(
          {fmt::format("schema/{}", file.stem().string()), infer::JsonSchemaTextToGbnf(text)});
    }
  }
  for (const NamedGrammar& schema : kStressSchemas)
    out.push_back(
        {fmt::format("stress/{}", schema.name), infer::JsonSchemaTextToGbnf(schema.gbnf)});
  out.push_back({"stress/enum_500", infer::JsonSchemaTextToGbnf(LargeEnumSchema(500))});
  infer::StructuredOutput json_object;
  out.push_back({"stress/json_object", infer::StructuredOutputToGbnf(json_object)});
  return out;
}

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
  std::string schemas_dir = "tests/fixtures/grammar/schemas";
  std::vector<std::string> only;
  app.add_option("--tokenizers-dir", tokenizers_dir, "folder with <model>/tokenizer.json");
  app.add_option("--models", models, "model keys");
  app.add_option("--tokens", tokens_per_grammar, "timed tokens per grammar and model");
  app.add_option("--max-walk", max_walk, "longest random walk, in tokens");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  app.add_option("--schemas", schemas_dir, "folder of JSON schemas (empty: none)");
  app.add_option("--only", only, "run only the grammars whose name contains one of these");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json report;
    report["benchmark"] = "grammar_mask";
    report["cpu"] = CpuName();
    report["threads"] = 1;
    report["command"] = fmt::format("grammar_bench --tokens {}", tokens_per_grammar);
    std::vector<NamedGrammar> grammars = AllGrammars(schemas_dir);
    if (!only.empty()) {
      std::erase_if(grammars, [&](const NamedGrammar& grammar) {
        return std::none_of(only.begin(), only.end(), [&](const std::string& part) {
          return grammar.name.find(part) != std::string::npos;
        });
      });
    }
    report["results"] = nlohmann::json::array();
    report["summaries"] = nlohmann::json::array();
    fmt::print(
        "| model | grammar | compile ms | tokens | mean us | p50 us | p99 us | max us | "
        "walks ended |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& model : models) {
      const auto path = std::filesystem::path(tokenizers_dir) / model / "tokenizer.json";
      auto tokenizer = infer::Tokenizer::FromFile(path);
      auto start = Clock::now();
      Vocabulary vocab;
      vocab.token_bytes = infer::TokenBytes(*tokenizer);
      const double token_bytes_ms = MsSince(start);
      vocab.special_ids = infer::SpecialTokenIds(*tokenizer);
      for (const char* eos : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<eos>"}) {
        if (auto id = tokenizer->TokenToId(eos)) vocab.end_ids.push_back(*id);
      }
      const int64_t vocab_size = tokenizer->VocabSize();
      auto index = std::make_shared<const VocabularyIndex>(std::move(vocab));
      const double index_ms = MsSince(start);
      fmt::print(
          "<!-- {}: vocabulary {} ids, index built in {:.1f} ms (TokenBytes {:.1f} ms) -->\n",
          model, vocab_size, index_ms, token_bytes_ms);
      // Per pass, over the schema grammars (schema/ and stress/): tokens, summed us, worst p99,
      // compile ms (sum and max).
      struct Summary {
        size_t tokens = 0;
        double sum_us = 0, worst_p99 = 0, compile_sum = 0, compile_max = 0;
        std::string worst_p99_name, compile_max_name;
        std::vector<double> all_us;  // every schema token's, for the p99 of the set as a whole
      };
      Summary summary[2];
      for (const NamedGrammar& grammar : grammars) {
        start = Clock::now();
        auto compiled = CompiledGrammar::FromGbnf(grammar.gbnf, index);
        const bool schema = grammar.name.find('/') != std::string::npos;
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
          if (schema) {
            Summary& sum = summary[pass];
            sum.tokens += us.size();
            sum.sum_us += mean * static_cast<double>(us.size());
            sum.all_us.insert(sum.all_us.end(), us.begin(), us.end());
            if (p99 > sum.worst_p99) {
              sum.worst_p99 = p99;
              sum.worst_p99_name = grammar.name;
            }
            if (pass == 0) {
              sum.compile_sum += compile_ms;
              if (compile_ms > sum.compile_max) {
                sum.compile_max = compile_ms;
                sum.compile_max_name = grammar.name;
              }
            }
          }
          fmt::print("| {} | {} ({}) | {:.1f} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {}/{} |\n",
                     model, grammar.name, pass == 0 ? "cold" : "warm", compile_ms, us.size(), mean,
                     p50, p99, sorted.back(), ended, walks);
          report["results"].push_back({{"model", model},
                                       {"vocab_size", vocab_size},
                                       {"index_ms", index_ms},
                                       {"token_bytes_ms", token_bytes_ms},
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
      for (int pass = 0; pass < 2; ++pass) {
        const Summary& sum = summary[pass];
        if (sum.tokens == 0) continue;
        const char* pass_name = pass == 0 ? "cold" : "warm";
        std::vector<double> pooled = sum.all_us;
        const size_t at = std::min(pooled.size() - 1, pooled.size() * 99 / 100);
        std::nth_element(pooled.begin(), pooled.begin() + static_cast<ptrdiff_t>(at), pooled.end());
        const double pooled_p99 = pooled[at];
        fmt::print(
            "<!-- {} schemas ({}): {} tokens, mean {:.1f} us, p99 of the set {:.1f} us, worst p99 "
            "{:.1f} us ({}); compile total {:.1f} ms, max {:.1f} ms ({}) -->\n",
            model, pass_name, sum.tokens, sum.sum_us / static_cast<double>(sum.tokens), pooled_p99,
            sum.worst_p99, sum.worst_p99_name, sum.compile_sum, sum.compile_max,
            sum.compile_max_name);
        report["summaries"].push_back({{"model", model},
                                       {"pass", pass_name},
                                       {"tokens", sum.tokens},
                                       {"mean_us", sum.sum_us / static_cast<double>(sum.tokens)},
                                       {"p99_us", pooled_p99},
                                       {"worst_p99_us", sum.worst_p99},
                                       {"worst_p99_grammar", sum.worst_p99_name},
                                       {"compile_total_ms", sum.compile_sum},
                                       {"compile_max_ms", sum.compile_max},
                                       {"compile_max_grammar", sum.compile_max_name}});
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
