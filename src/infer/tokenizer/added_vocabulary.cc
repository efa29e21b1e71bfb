// Added-token matching (Aho-Corasick leftmost-longest semantics via a byte trie).
#include "infer/tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer {
namespace {

bool IsWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsWordCharacter(char32_t cp) {
  if (cp == '_') return true;
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

// Code point that ends at text[end) (text valid UTF-8, end > 0).
char32_t PreviousCodePoint(std::string_view text, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  return NextCodePoint(text, pos);
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int32_t token_index) {
  if (nodes.empty()) {
    nodes.emplace_back();
    root.fill(-1);
  }
  int32_t node = 0;
  for (size_t i = 0; i < key.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(key[i]);
    int32_t child = -1;
    if (node == 0) {
      child = root[byte];
    } else {
      auto& children = nodes[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, -1));
      if (it != children.end() && it->first == byte) child = it->second;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      if (node == 0) {
        root[byte] = child;
      } else {
        auto& children = nodes[node].children;
        children.insert(
            std::lower_bound(children.begin(), children.end(), std::make_pair(byte, -1)),
            {byte, child});
      }
    }
    node = child;
  }
  if (nodes[node].token_index < 0) nodes[node].token_index = token_index;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::LongestMatch(std::string_view text,
                                                               size_t pos) const {
  std::pair<int32_t, size_t> best{-1, pos};
  if (nodes.empty()) return best;
  int32_t node = root[static_cast<uint8_t>(text[pos])];
  size_t i = pos + 1;
  while (node >= 0) {
    if (nodes[node].token_index >= 0) best = {nodes[node].token_index, i};
    if (i >= text.size()) break;
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, -1));
    node = (it != children.end() && it->first == byte) ? it->second : -1;
    ++i;
  }
  return best;
}

AddedVocabulary::AddedVocabulary(const nlohmann::json& added_tokens,
                                 const std::function<void(std::string&)>& normalize) {
  if (added_tokens.is_null()) return;
  INFER_CHECK(added_tokens.is_array(), "tokenizer.json: added_tokens must be an array");
  for (const auto& entry : added_tokens) {
    AddedToken token;
    try {
      token.id = entry.at("id").get<int32_t>();
      token.content = entry.at("content").get<std::string>();
      token.special = entry.value("special", false);
      token.lstrip = entry.value("lstrip", false);
      token.rstrip = entry.value("rstrip", false);
      token.single_word = entry.value("single_word", false);
      token.normalized = entry.value("normalized", !token.special);
    } catch (const nlohmann::json::exception& e) {
      Fail("tokenizer.json: bad added token: {}", e.what());
    }
    INFER_CHECK(token.id >= 0, "tokenizer.json: added token '{}' has a negative id", token.content);
    if (index_by_id_.count(token.id)) continue;
    const size_t index = tokens_.size();
    index_by_id_[token.id] = index;
    index_by_content_.emplace(token.content, index);
    if (!token.content.empty()) {
      if (token.normalized) {
        std::string pattern = token.content;
        if (normalize) normalize(pattern);
        if (!pattern.empty()) normalized_trie_.Insert(pattern, static_cast<int32_t>(index));
      } else {
        raw_trie_.Insert(token.content, static_cast<int32_t>(index));
      }
    }
    tokens_.push_back(std::move(token));
  }
}

void AddedVocabulary::Split(std::string_view text, bool normalized,
                            std::vector<TextSegment>& out) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    auto [token_index, match_end] =
        trie.nodes.empty() ? std::pair<int32_t, size_t>{-1, pos} : trie.LongestMatch(text, pos);
    if (token_index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[token_index];
    size_t start = pos;
    size_t stop = match_end;
    if (token.single_word) {
      size_t unused;
      const bool start_space =
          start == 0 || !IsWordCharacter(PreviousCodePoint(text, start, unused));
      size_t after = stop;
      const bool stop_space = stop == text.size() || !IsWordCharacter(NextCodePoint(text, after));
      if (!start_space || !stop_space) {
        pos = match_end;  // HF filters after a non-overlapping find_iter: the match is consumed
        continue;
      }
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t previous;
        if (!IsWhitespace(PreviousCodePoint(text, new_start, previous))) break;
        new_start = previous;
      }
      start = std::max(new_start, segment_start);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsWhitespace(NextCodePoint(text, next))) break;
        stop = next;
      }
    }
    if (segment_start < start) out.push_back({segment_start, start, -1});
    out.push_back({start, stop, token.id});
    segment_start = stop;
    pos = stop;
  }
  if (segment_start < text.size()) out.push_back({segment_start, text.size(), -1});
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = index_by_content_.find(std::string(content));
  if (it == index_by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

}  // namespace infer
