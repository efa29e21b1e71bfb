// The JSON Schema compiler's objects (properties in the order given, required ones, extra keys that
// are none of the declared) and arrays (prefixItems, items, minItems and maxItems).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "infer/grammar/grammar_error.h"
#include "infer/grammar/json_schema_compiler.h"

namespace infer::schema {

std::string SchemaCompiler::KeyExcept(const std::vector<std::string>& names) {
  if (names.empty()) return AnyString();
  // low_whole trie of the names' code points.
  struct Node {
    std::map<char32_t, size_t> kids;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : names) {
    size_t node = 0;
    for (size_t i = 0; i < name.size();) {
      const auto lead = static_cast<unsigned char>(name[i]);
      const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      char32_t cp = len == 1   ? lead
                    : len == 2 ? (lead & 0x1F)
                    : len == 3 ? (lead & 0x0F)
                               : (lead & 0x07);
      for (size_t k = 1; k < len && i + k < name.size(); ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(name[i + k]) & 0x3F);
      }
      i += len;
      auto it = trie[node].kids.find(cp);
      if (it == trie[node].kids.end()) {
        trie.push_back({});
        it = trie[node].kids.emplace(cp, trie.size() - 1).first;
      }
      node = it->second;
    }
    trie[node].terminal = true;
  }
  rules_.Charge(trie.size() * 16);
  const grammar::CodeSet raw =
      grammar::Complement(grammar::Normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  const std::string raw_char = rules_.Add("key-char", grammar::GbnfClass(raw));
  const std::string quote = "\"\\\"\"";
  const std::string free_tail = rules_.Add("key-tail", raw_char + "* " + quote);
  std::vector<std::string> names_of(trie.size());
  for (size_t n = 0; n < trie.size(); ++n) names_of[n] = rules_.Reserve("key-except");
  for (size_t n = trie.size(); n-- > 0;) {
    std::vector<std::string> parts;
    if (!trie[n].terminal) parts.push_back(quote);
    grammar::CodeSet others = raw;
    for (const auto& [cp, kid] : trie[n].kids) {
      if (!grammar::Contains(raw, cp)) continue;
      others = grammar::Subtract(others, {{cp, cp}});
      parts.push_back(GbnfLiteral(grammar::Utf8(cp)) + " " + names_of[kid]);
    }
    if (!others.empty()) parts.push_back(grammar::GbnfClass(others) + " " + free_tail);
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    rules_.Define(names_of[n], body);
  }
  return quote + " " + names_of[0];
}

std::string SchemaCompiler::CompileObject(const Json& schema, const std::string& pointer,
                                          std::string_view hint) {
  const HeadGuard guard(head_open_);
  std::vector<Property> props;
  std::set<std::string> required;
  if (const auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array()) Refuse(Child(pointer, "required"), "must be an array of strings");
    for (const Json& name : *it) {
      if (!name.is_string()) Refuse(Child(pointer, "required"), "must be an array of strings");
      required.insert(name.get<std::string>());
    }
  }
  std::vector<std::string> names;
  const std::string props_pointer = Child(pointer, "properties");
  const Json empty = Json::object();
  const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
  if (!properties.is_object()) Refuse(props_pointer, "must be an object");
  for (const auto& [name, sub] : properties.items()) {
    names.push_back(name);
    const bool is_required = required.count(name) != 0;
    if (sub.is_boolean() && !sub.get<bool>()) {
      if (is_required)
        Refuse(Child(props_pointer, name), "a required property whose schema is false");
      continue;
    }
    const std::string value = Compile(sub, Child(props_pointer, name), name);
    props.push_back(
        {name, GbnfLiteral(DumpJson(Json(name))) + " " + Colon() + " " + value, is_required});
  }
  // Required names without a schema: any value, after the declared ones, in the given order.
  if (const auto it = schema.find("required"); it != schema.end()) {
    for (const Json& name : *it) {
      const std::string n = name.get<std::string>();
      if (properties.contains(n)) continue;
      if (std::find(names.begin(), names.end(), n) != names.end()) continue;
      names.push_back(n);
      props.push_back({n, GbnfLiteral(DumpJson(Json(n))) + " " + Colon() + " " + AnyValue(), true});
    }
  }
  // Extra members.
  std::optional<std::string> extra_value;
  const auto ap = schema.find("additionalProperties");
  if (ap == schema.end()) {
    if (!options_.strict) extra_value = AnyValue();
  } else if (ap->is_boolean()) {
    if (ap->get<bool>()) extra_value = AnyValue();
  } else {
    extra_value =
        Compile(*ap, Child(pointer, "additionalProperties"), std::string(hint) + "-extra");
  }
  std::string extra_member;
  if (extra_value) {
    extra_member = rules_.Add(std::string(hint) + "-extra-kv",
                              KeyExcept(names) + " " + Colon() + " " + *extra_value);
  }
  // after(i): what follows once a member was written; first(i): nothing written yet.
  const std::string tail = extra_value ? Group(Seq({Comma(), extra_member}), "*") : "";
  std::vector<std::string> after(props.size() + 1);
  after[props.size()] = tail;
  for (size_t i = props.size(); i-- > 0;) {
    const std::string piece = Comma() + " " + props[i].member;
    std::string body = props[i].required ? piece : Group(piece, "?");
    if (!after[i + 1].empty()) body += " " + after[i + 1];
    after[i] = rules_.Add(std::string(hint) + "-after", body);
  }
  std::string first = extra_value ? Group(Seq({extra_member, tail}), "?") : "";
  for (size_t i = props.size(); i-- > 0;) {
    std::string with = Seq({props[i].member, after[i + 1]});
    if (props[i].required) {
      first = with;
    } else {
      first = rules_.Add(std::string(hint) + "-first",
                         first.empty() ? Group(with, "?") : Seq({with, "|", first}));
    }
  }
  return Seq({Open('{'), first, Close('}')});
}

std::string SchemaCompiler::CompileArray(const Json& schema, const std::string& pointer,
                                         std::string_view hint) {
  const HeadGuard guard(head_open_);
  std::vector<std::string> prefix;
  std::optional<std::string> item;  // none: no items beyond the prefix
  const Json* tuple = nullptr;
  std::string tuple_pointer;
  const Json* rest = nullptr;
  std::string rest_pointer;
  if (const auto it = schema.find("prefixItems"); it != schema.end()) {
    tuple = &*it;
    tuple_pointer = Child(pointer, "prefixItems");
    if (schema.contains("additionalItems")) {
      Refuse(Child(pointer, "additionalItems"), "additionalItems with prefixItems (use items)");
    }
    if (const auto items = schema.find("items"); items != schema.end()) {
      rest = &*items;
      rest_pointer = Child(pointer, "items");
    }
  } else if (const auto items = schema.find("items"); items != schema.end() && items->is_array()) {
    tuple = &*items;  // draft 4-7 tuple form
    tuple_pointer = Child(pointer, "items");
    if (const auto more = schema.find("additionalItems"); more != schema.end()) {
      rest = &*more;
      rest_pointer = Child(pointer, "additionalItems");
    }
  } else if (items != schema.end()) {
    rest = &*items;
    rest_pointer = Child(pointer, "items");
  }
  if (tuple != nullptr) {
    if (!tuple->is_array()) Refuse(tuple_pointer, "must be an array of schemas");
    if (tuple->size() > options_.max_repetition) Refuse(tuple_pointer, "too many items");
    for (size_t i = 0; i < tuple->size(); ++i) {
      const Json& sub = (*tuple)[i];
      if (sub.is_boolean() && !sub.get<bool>()) break;  // no item from here on
      prefix.push_back(
          Compile(sub, Child(tuple_pointer, std::to_string(i)), std::string(hint) + "-item"));
    }
  }
  bool rest_allowed = true;
  if (tuple != nullptr && prefix.size() < tuple->size()) rest_allowed = false;
  if (rest_allowed) {
    if (rest == nullptr) {
      item = AnyValue();
    } else if (rest->is_boolean() && !rest->get<bool>()) {
      item = std::nullopt;
    } else {
      item = Compile(*rest, rest_pointer, std::string(hint) + "-item");
    }
  }
  const size_t min = Count(schema, "minItems", pointer);
  std::optional<size_t> max = MaxCount(schema, "maxItems", pointer);
  if (max && *max < min) Refuse(Child(pointer, "maxItems"), "maxItems is below minItems");
  const size_t p = prefix.size();
  if (!item) max = max ? std::min(*max, p) : p;
  if (min > (max ? *max : min))
    Refuse(Child(pointer, "minItems"), "more items than the schema allows");
  // Items beyond the prefix: how many, and with or without a leading comma.
  const size_t tail_min = min > p ? min - p : 0;
  std::optional<size_t> tail_max;
  if (max) tail_max = *max > p ? *max - p : 0;
  auto tail = [&](bool comma) -> std::string {
    if (!item || (tail_max && *tail_max == 0)) return "";
    const std::string sep_item = Group(Seq({Comma(), *item}), "");
    if (comma) return Repeat(sep_item, tail_min, tail_max);
    const std::string more = Repeat(sep_item, tail_min > 0 ? tail_min - 1 : 0,
                                    tail_max ? std::optional<size_t>(*tail_max - 1) : std::nullopt);
    const std::string seq = more == "\"\"" ? *item : fmt::format("{} {}", *item, more);
    return tail_min > 0 ? seq : fmt::format("({})?", seq);
  };
  std::string body = tail(p > 0);
  for (size_t i = p; i-- > 0;) {
    if (max && i >= *max) continue;
    std::string piece = Seq({i > 0 ? Comma() : "", prefix[i], body});
    body = i < min ? piece : Group(piece, "?");
  }
  return Seq({Open('['), body, Close(']')});
}

}  // namespace infer::schema
