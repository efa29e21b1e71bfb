// JsonSchemaToGbnf checked against references that do not come from the converter:
//  - every schema of tests/fixtures/grammar/schemas: 20 random walks over the grammar (the
//    independent recognizer of gbnf_recognizer.h) must each end, and every output must parse and
//    validate under Debian's python3-jsonschema (tests/grammar/validate_json.py), formats
//    included; the hand-written instances of tests/fixtures/grammar/valid, which jsonschema
//    accepts, must be accepted by the grammar;
//  - tests/fixtures/grammar/refused.jsonl: schemas that must be refused, with the keyword and
//    the JSON pointer the message must name;
//  - integer and number ranges: the grammar's verdict on every value of a grid around the bounds
//    against plain arithmetic;
//  - hostile schemas: errors, not hangs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/json_schema.h"
#include "testing/paths.h"
#include "unit/grammar/gbnf_recognizer.h"

namespace infer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing_gbnf::Grammar;

const fs::path kFixtures = fs::path(::infer::testing::FixturesDir()) / "grammar";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Runs the Python validator on `instances` (one per line); its output, and whether all validate.
bool Validate(const fs::path& schema, const std::vector<std::string>& instances,
              std::string& report) {
  const fs::path input =
      fs::temp_directory_path() / ("grammar_schema_test_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(input, std::ios::binary);
    for (const std::string& s : instances) out << s << '\n';
  }
  const std::string command = std::string("/usr/bin/python3 ") + ::infer::testing::SourceDir() +
                              "/tests/grammar/validate_json.py '" + schema.string() + "' < '" +
                              input.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char buffer[4096];
  report.clear();
  while (const size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) report.append(buffer, n);
  const int status = ::pclose(pipe);
  fs::remove(input);
  return status == 0;
}

std::vector<fs::path> SchemaFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kFixtures / "schemas")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(JsonSchemaToGbnf, FixtureSetIsLargeEnough) { EXPECT_GE(SchemaFiles().size(), 30u); }

TEST(JsonSchemaToGbnf, HandWrittenValidInstancesAreAccepted) {
  for (const fs::path& file : SchemaFiles()) {
    SCOPED_TRACE(file.filename().string());
    const std::string gbnf = JsonSchemaTextToGbnf(ReadFile(file));
    const Grammar grammar(gbnf);
    const fs::path valid = kFixtures / "valid" / (file.stem().string() + ".jsonl");
    ASSERT_TRUE(fs::exists(valid));
    const std::vector<std::string> instances = Lines(ReadFile(valid));
    ASSERT_FALSE(instances.empty());
    std::string report;
    ASSERT_TRUE(Validate(file, instances, report)) << "the reference rejects an example\n"
                                                   << report;
    for (const std::string& instance : instances) {
      EXPECT_TRUE(grammar.Accepts(instance)) << instance << "\n" << gbnf;
    }
  }
}

TEST(JsonSchemaToGbnf, RandomWalksEndAndValidate) {
  std::mt19937 rng(26);
  double compile_ms = 0;
  for (const fs::path& file : SchemaFiles()) {
    SCOPED_TRACE(file.filename().string());
    const std::string text = ReadFile(file);
    const auto start = std::chrono::steady_clock::now();
    const std::string gbnf = JsonSchemaTextToGbnf(text);
    compile_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const Grammar grammar(gbnf);
    std::vector<std::string> outputs;
    for (int i = 0; i < 20; ++i) {
      const std::optional<std::string> output = grammar.Sample(rng, 20000);
      ASSERT_TRUE(output.has_value()) << "a random walk did not end\n" << gbnf;
      outputs.push_back(*output);
    }
    std::string report;
    EXPECT_TRUE(Validate(file, outputs, report)) << report << "\n" << gbnf;
  }
  std::printf("compiled %zu schemas in %.2f ms\n", SchemaFiles().size(), compile_ms);
}

TEST(JsonSchemaToGbnf, RefusedSchemasNameTheKeywordAndWhere) {
  for (const std::string& line : Lines(ReadFile(kFixtures / "refused.jsonl"))) {
    const Json item = Json::parse(line);
    SCOPED_TRACE(item["schema"].dump());
    try {
      const std::string gbnf = JsonSchemaToGbnf(item["schema"]);
      ADD_FAILURE() << "accepted:\n" << gbnf.substr(0, 2000);
    } catch (const GrammarError& e) {
      const std::string message = e.what();
      for (const Json& expected : item["expect"]) {
        EXPECT_NE(message.find(expected.get<std::string>()), std::string::npos)
            << "'" << expected.get<std::string>() << "' not in: " << message;
      }
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

// Integer ranges: every integer of a window around the bounds, against arithmetic.
TEST(JsonSchemaToGbnf, IntegerRangesAreExact) {
  struct Case {
    Json schema;
    long lo;
    long hi;
  };
  const std::vector<Case> cases = {
      {{{"minimum", 0}, {"maximum", 0}}, 0, 0},
      {{{"minimum", -7}, {"maximum", 13}}, -7, 13},
      {{{"minimum", 99}, {"maximum", 1001}}, 99, 1001},
      {{{"minimum", -1001}, {"maximum", -99}}, -1001, -99},
      {{{"exclusiveMinimum", 9}, {"exclusiveMaximum", 100}}, 10, 99},
      {{{"minimum", 1.5}, {"maximum", 20.5}}, 2, 20},
      {{{"exclusiveMinimum", -10.5}, {"maximum", -0.5}}, -10, -1},
      {{{"minimum", 12345}, {"maximum", 12399}}, 12345, 12399},
      {{{"minimum", 190}, {"maximum", 2009}}, 190, 2009},
      {{{"minimum", 5}, {"exclusiveMinimum", 7}, {"maximum", 30}, {"exclusiveMaximum", 25}}, 8, 24},
  };
  for (const Case& c : cases) {
    Json schema = c.schema;
    schema["type"] = "integer";
    SCOPED_TRACE(schema.dump());
    const std::string gbnf = JsonSchemaToGbnf(schema);
    const Grammar grammar(gbnf);
    for (long v = c.lo - 150; v <= c.hi + 150; ++v) {
      EXPECT_EQ(grammar.Accepts(std::to_string(v)), v >= c.lo && v <= c.hi) << v << "\n" << gbnf;
    }
    EXPECT_FALSE(grammar.Accepts("-0"));
    EXPECT_FALSE(grammar.Accepts("01"));
  }
  // One side open: the other side is capped at 15 digits (or the bound's own).
  const Grammar lower(JsonSchemaToGbnf(Json{{"type", "integer"}, {"minimum", -3}}));
  for (const char* yes : {"-3", "0", "7", "999999999999999"})
    EXPECT_TRUE(lower.Accepts(yes)) << yes;
  for (const char* no : {"-4", "-30", "1000000000000000", "1.5"})
    EXPECT_FALSE(lower.Accepts(no)) << no;
  const Grammar big(
      JsonSchemaToGbnf(Json{{"type", "integer"}, {"minimum", 18446744073709551615ull}}));
  EXPECT_TRUE(big.Accepts("18446744073709551615"));
  EXPECT_TRUE(big.Accepts("99999999999999999999"));
  EXPECT_FALSE(big.Accepts("18446744073709551614"));
}

// Number ranges: every decimal of a grid (integer part and up to three fraction digits),
// compared in integers scaled by 1000.
TEST(JsonSchemaToGbnf, NumberRangesAreExactOnADecimalGrid) {
  struct Case {
    Json schema;
    long lo;  // scaled by 1000
    bool lo_excl;
    long hi;
    bool hi_excl;
  };
  const std::vector<Case> cases = {
      {{{"minimum", 0.5}, {"maximum", 2.25}}, 500, false, 2250, false},
      {{{"exclusiveMinimum", -1.5}, {"exclusiveMaximum", 0}}, -1500, true, 0, true},
      {{{"minimum", -0.001}, {"maximum", 0.001}}, -1, false, 1, false},
      {{{"exclusiveMinimum", 0}, {"exclusiveMaximum", 1}}, 0, true, 1000, true},
      {{{"minimum", -2.75}, {"exclusiveMaximum", -0.25}}, -2750, false, -250, true},
      {{{"minimum", 1.05}, {"maximum", 1.1}}, 1050, false, 1100, false},
      {{{"minimum", 3}, {"maximum", 3}}, 3000, false, 3000, false},
  };
  for (const Case& c : cases) {
    Json schema = c.schema;
    schema["type"] = "number";
    SCOPED_TRACE(schema.dump());
    const std::string gbnf = JsonSchemaToGbnf(schema);
    const Grammar grammar(gbnf);
    for (long v = -4000; v <= 4000; ++v) {
      const bool in = (c.lo_excl ? v > c.lo : v >= c.lo) && (c.hi_excl ? v < c.hi : v <= c.hi);
      const long whole = std::labs(v) / 1000;
      const long frac = std::labs(v) % 1000;
      const std::string sign = v < 0 ? "-" : "";
      // Every spelling of the value: no fraction (when whole), or 1 to 3 fraction digits.
      std::vector<std::string> texts;
      if (frac == 0) texts.push_back(sign + std::to_string(whole));
      char digits[8];
      std::snprintf(digits, sizeof digits, "%03ld", frac);
      std::string f = digits;
      while (f.size() > 1 && f.back() == '0') f.pop_back();
      for (std::string g = f; g.size() <= 3; g += '0')
        texts.push_back(sign + std::to_string(whole) + "." + g);
      for (const std::string& text : texts) {
        if (v == 0 && text[0] == '-') continue;  // -0: either way
        EXPECT_EQ(grammar.Accepts(text), in) << text << "\n" << gbnf;
      }
    }
  }
}

TEST(JsonSchemaToGbnf, PropertyOrderIsKeptAndOptionalsMayBeLeftOut) {
  const Grammar grammar(JsonSchemaTextToGbnf(R"({"type":"object","properties":{
      "z":{"type":"integer"},"a":{"type":"boolean"},"m":{"type":"null"}},
      "required":["a"],"additionalProperties":false})"));
  EXPECT_TRUE(grammar.Accepts(R"({"a":true})"));
  EXPECT_TRUE(grammar.Accepts(R"({"z":1,"a":true,"m":null})"));
  EXPECT_TRUE(grammar.Accepts(R"({"z": 1, "a": true})"));
  EXPECT_FALSE(grammar.Accepts(R"({"a":true,"z":1})"));
  EXPECT_FALSE(grammar.Accepts(R"({"z":1})"));
  EXPECT_FALSE(grammar.Accepts(R"({"a":true,"x":1})"));
  EXPECT_FALSE(grammar.Accepts(R"({})"));
}

TEST(JsonSchemaToGbnf, AdditionalPropertiesDefaultAndStrictMode) {
  const std::string schema = R"({"type":"object","properties":{"ab":{"type":"integer"}}})";
  const Grammar open(JsonSchemaTextToGbnf(schema));
  EXPECT_TRUE(open.Accepts(R"({"ab":1,"x":[true]})"));
  EXPECT_TRUE(open.Accepts(R"({"a":null})"));
  EXPECT_TRUE(open.Accepts(R"({"abc":"s"})"));
  // An extra key is never a declared one (its value would skip the declared schema).
  EXPECT_FALSE(open.Accepts(R"({"ab":1,"ab":"s"})"));
  EXPECT_FALSE(open.Accepts(R"({"ab":"s"})"));
  JsonSchemaOptions strict;
  strict.strict = true;
  const Grammar closed(JsonSchemaTextToGbnf(schema, strict));
  EXPECT_TRUE(closed.Accepts(R"({"ab":1})"));
  EXPECT_FALSE(closed.Accepts(R"({"ab":1,"x":1})"));
}

TEST(JsonSchemaToGbnf, WhitespaceModes) {
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"],"additionalProperties":false})";
  JsonSchemaOptions compact;
  compact.whitespace = JsonSchemaOptions::Whitespace::kCompact;
  const Grammar c(JsonSchemaTextToGbnf(schema, compact));
  EXPECT_TRUE(c.Accepts(R"({"a":[1,2]})"));
  EXPECT_FALSE(c.Accepts(R"({"a": [1, 2]})"));
  const Grammar single(JsonSchemaTextToGbnf(schema));
  EXPECT_TRUE(single.Accepts(R"({"a": [1, 2]})"));
  EXPECT_FALSE(single.Accepts(R"({"a":  [1,2]})"));
  EXPECT_FALSE(single.Accepts(R"({ "a":[1,2]})"));
  JsonSchemaOptions flexible;
  flexible.whitespace = JsonSchemaOptions::Whitespace::kFlexible;
  const Grammar f(JsonSchemaTextToGbnf(schema, flexible));
  EXPECT_TRUE(f.Accepts("{\n  \"a\" : [ 1 ,\n\t2 ]\n}"));
  EXPECT_FALSE(f.Accepts("{\"a\":[1,2]      }"));
}

TEST(JsonSchemaToGbnf, JsonObjectAndAnyValue) {
  const Grammar object(JsonSchemaTextToGbnf(R"({"type":"json_object"})"));
  EXPECT_TRUE(object.Accepts(R"({"a":[1,{"b":null}],"c":"\u00e9\n"})"));
  EXPECT_FALSE(object.Accepts("[1]"));
  const Grammar any(JsonSchemaToGbnf(Json(true)));
  for (const char* yes : {"1", "-0.5e+3", "\"s\"", "null", "[]", "{}", "[[[[1]]]]"}) {
    EXPECT_TRUE(any.Accepts(yes)) << yes;
  }
  for (const char* no : {"01", "1.", ".5", "+1", "nul", "[1,]", "{\"a\"}", "\"\\x\"", "\"\x01\""}) {
    EXPECT_FALSE(any.Accepts(no)) << no;
  }
  // Bounded nesting of free-form values, so random walks end.
  EXPECT_FALSE(any.Accepts("[[[[[[[[1]]]]]]]]"));
}

TEST(JsonSchemaToGbnf, StringLengthsCountCodePoints) {
  const Grammar grammar(JsonSchemaTextToGbnf(R"({"type":"string","minLength":2,"maxLength":3})"));
  EXPECT_TRUE(grammar.Accepts("\"\u00e9\U0001F600\""));
  EXPECT_TRUE(grammar.Accepts(R"("a\"b")"));
  EXPECT_TRUE(grammar.Accepts(R"("\u00e9\n")"));
  EXPECT_FALSE(grammar.Accepts(R"("a")"));
  EXPECT_FALSE(grammar.Accepts(R"("abcd")"));
  // A surrogate pair in \u escapes is one character to a validator: left out of the grammar.
  EXPECT_FALSE(grammar.Accepts(R"("\ud83d\ude00")"));
}

TEST(JsonSchemaToGbnf, DatesAreExactCalendarDates) {
  const Grammar grammar(JsonSchemaTextToGbnf(R"({"type":"string","format":"date"})"));
  for (const char* yes : {"2024-02-29", "2000-02-29", "1999-12-31", "0001-01-01", "2023-04-30"}) {
    EXPECT_TRUE(grammar.Accepts(std::string("\"") + yes + "\"")) << yes;
  }
  for (const char* no :
       {"2023-02-29", "1900-02-29", "2023-04-31", "0000-01-01", "2023-13-01", "2023-1-01"}) {
    EXPECT_FALSE(grammar.Accepts(std::string("\"") + no + "\"")) << no;
  }
}

TEST(JsonSchemaToGbnf, HostileSchemasAreBoundedErrors) {
  // Deep nesting.
  Json deep = {{"type", "integer"}};
  for (int i = 0; i < 200; ++i) deep = Json{{"type", "array"}, {"items", deep}};
  EXPECT_THROW(JsonSchemaToGbnf(deep), GrammarError);
  // A huge grammar: many properties with long names.
  Json wide = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 20000; ++i) {
    wide["properties"][std::string(60, 'p') + std::to_string(i)] = {{"type", "string"}};
  }
  EXPECT_THROW(JsonSchemaToGbnf(wide), GrammarError);
  // Exponential blowup through shared $defs stays linear: each definition is one rule (a chain
  // of 20 doubling definitions, 2^20 leaves written out, compiles at once)...
  const auto chain = [](int length) {
    Json defs = {{"$defs", Json::object()}};
    defs["$defs"]["d0"] = {{"type", "integer"}};
    for (int i = 1; i < length; ++i) {
      const std::string prev = fmt::format("#/$defs/d{}", i - 1);
      defs["$defs"][fmt::format("d{}", i)] = {
          {"type", "array"}, {"prefixItems", Json::array({{{"$ref", prev}}, {{"$ref", prev}}})}};
    }
    defs["$ref"] = fmt::format("#/$defs/d{}", length - 1);
    return defs;
  };
  auto start = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(JsonSchemaToGbnf(chain(20)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // ...and a chain nested deeper than the limit (each link nests an array) is refused at once.
  start = std::chrono::steady_clock::now();
  EXPECT_THROW(JsonSchemaToGbnf(chain(40)), GrammarError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Many long property names that share their first 40 characters: linear, not quadratic.
  start = std::chrono::steady_clock::now();
  EXPECT_THROW(JsonSchemaToGbnf(wide), GrammarError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Not JSON.
  EXPECT_THROW(JsonSchemaTextToGbnf("{\"type\":"), GrammarError);
}

}  // namespace
}  // namespace infer
