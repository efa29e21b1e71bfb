// BPE merging with a rank-ordered heap over a linked list of symbols: O(n log n) per word, the
// same merge order as Hugging Face's Word::merge_all (lowest rank first, then leftmost).
#include "infer/tokenizer/bpe.h"

#include <queue>

#include "infer/core/error.h"
#include "infer/tokenizer/utf8.h"

namespace infer {

void Bpe::MergeMap::Build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity *= 2;
  keys_.assign(capacity, ~uint64_t{0});
  values_.assign(capacity, Merge{0, 0});
  mask_ = capacity - 1;
  for (const auto& [key, merge] : entries) {
    size_t slot = (key * 0x9E3779B97F4A7C15ULL) >> 20 & mask_;
    while (keys_[slot] != ~uint64_t{0} && keys_[slot] != key) slot = (slot + 1) & mask_;
    if (keys_[slot] == key) continue;  // duplicate merge: the first (lowest rank) wins
    keys_[slot] = key;
    values_[slot] = merge;
  }
}

const Bpe::Merge* Bpe::MergeMap::Find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  size_t slot = (key * 0x9E3779B97F4A7C15ULL) >> 20 & mask_;
  while (true) {
    if (keys_[slot] == key) return &values_[slot];
    if (keys_[slot] == ~uint64_t{0}) return nullptr;
    slot = (slot + 1) & mask_;
  }
}

std::unique_ptr<Bpe> Bpe::Create(const nlohmann::json& model, TokenizerJson& data,
                                 const std::string& source) {
  auto bpe = std::make_unique<Bpe>();
  const auto string_or_empty = [&](const char* key) -> std::string {
    if (!model.contains(key) || model[key].is_null()) return "";
    INFER_CHECK(model[key].is_string(), "{}: model.{} must be a string", source, key);
    return model[key].get<std::string>();
  };
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    INFER_CHECK(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0,
                "{}: BPE dropout is not supported", source);
  }
  bpe->continuing_subword_prefix_ = string_or_empty("continuing_subword_prefix");
  bpe->end_of_word_suffix_ = string_or_empty("end_of_word_suffix");
  bpe->fuse_unk_ = model.value("fuse_unk", false);
  bpe->byte_fallback_ = model.value("byte_fallback", false);
  bpe->ignore_merges_ = model.value("ignore_merges", false);

  int32_t max_id = -1;
  bpe->vocab_.reserve(data.vocab.size());
  for (auto& [token, id] : data.vocab) max_id = std::max(max_id, id);
  bpe->id_to_token_.resize(static_cast<size_t>(max_id) + 1);
  bpe->has_token_.assign(static_cast<size_t>(max_id) + 1, false);
  for (auto& [token, id] : data.vocab) {
    bpe->id_to_token_[id] = token;
    bpe->has_token_[id] = true;
    bpe->vocab_.emplace(std::move(token), id);
  }
  data.vocab.clear();
  data.vocab.shrink_to_fit();

  bpe->unk_token_ = string_or_empty("unk_token");
  if (!bpe->unk_token_.empty()) {
    // HF tolerates an unk_token missing from the vocab until it is needed; so do we.
    if (auto id = bpe->TokenToId(bpe->unk_token_)) bpe->unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b) {
    auto id = bpe->TokenToId(fmt::format("<0x{:02X}>", b));
    bpe->byte_token_ids_[b] = id ? *id : -1;
  }

  std::vector<std::pair<uint64_t, Merge>> entries;
  entries.reserve(data.merges.size());
  const size_t prefix_length = bpe->continuing_subword_prefix_.size();
  std::string merged;
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const auto& [left, right] = data.merges[rank];
    auto left_id = bpe->TokenToId(left);
    auto right_id = bpe->TokenToId(right);
    INFER_CHECK(left_id && right_id, "{}: merge '{} {}' uses a token missing from the vocab",
                source, left, right);
    // With a continuing-subword prefix the right part loses it in the merged token.
    merged = left;
    // (HF drops prefix_length bytes unconditionally; keep that.)
    merged.append(std::string_view(right).substr(std::min(prefix_length, right.size())));
    auto new_id = bpe->TokenToId(merged);
    INFER_CHECK(new_id.has_value(), "{}: merge result '{}' is missing from the vocab", source,
                merged);
    entries.emplace_back(PairKey(*left_id, *right_id), Merge{static_cast<uint32_t>(rank), *new_id});
  }
  data.merges.clear();
  data.merges.shrink_to_fit();
  bpe->merges_.Build(entries);
  return bpe;
}

std::optional<int32_t> Bpe::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void Bpe::Tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::unique_lock lock(cache_mutex_, std::try_to_lock);
    if (lock.owns_lock()) {
      if (auto it = cache_.find(word); it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
  }
  const size_t first = out.size();
  MergeWord(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_, std::try_to_lock);
    if (lock.owns_lock() && cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
    }
  }
}

void Bpe::MergeWord(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  int32_t pending_unk = -1;  // an unk not yet added (fuse_unk grows it)
  const auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, true});
  };
  std::string scratch;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    pos += Utf8SequenceLength(static_cast<uint8_t>(word[pos]));
    std::string_view piece = word.substr(start, pos - start);
    const bool is_first = start == 0;
    const bool is_last = pos >= word.size();
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      scratch.clear();
      if (!is_first) scratch.append(continuing_subword_prefix_);
      scratch.append(piece);
      if (is_last) scratch.append(end_of_word_suffix_);
      piece = scratch;
    }
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : piece) all_bytes &= byte_token_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        // HF adds the byte tokens without flushing a pending unk first.
        for (char c : piece) add(byte_token_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_token_.empty()) continue;  // HF drops characters it has no token for
    INFER_CHECK(unk_id_.has_value(), "BPE: unk_token '{}' is not in the vocab", unk_token_);
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = *unk_id_;
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{},
                                                                               std::move(storage));
  const auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    if (const Merge* merge = merges_.Find(PairKey(symbols[left].id, symbols[right].id))) {
      queue.push(Candidate{merge->rank, left, merge->new_id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const Merge* merge = merges_.Find(PairKey(left.id, right.id));
    if (merge == nullptr || merge->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace infer
