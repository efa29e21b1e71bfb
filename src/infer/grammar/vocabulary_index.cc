// VocabularyIndex: the vocabulary sorted by bytes, with each token's kind and shared prefixes.
#include "infer/grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "infer/core/error.h"
#include "infer/grammar/gbnf.h"
#include "infer/grammar/grammar_error.h"
#include "infer/grammar/token_walk.h"

namespace infer::grammar {

VocabularyIndex::VocabularyIndex(Vocabulary vocabulary) : vocab_(std::move(vocabulary)) {
  num_ids_ = static_cast<int32_t>(vocab_.token_bytes.size());
  for (int32_t id : vocab_.special_ids) num_ids_ = std::max(num_ids_, id + 1);
  for (int32_t id : vocab_.end_ids) num_ids_ = std::max(num_ids_, id + 1);
  kind_.assign(static_cast<size_t>(num_ids_), kRegular);
  for (size_t id = 0; id < vocab_.token_bytes.size(); ++id) {
    if (vocab_.token_bytes[id].empty()) kind_[id] = kNever;
  }
  for (size_t id = vocab_.token_bytes.size(); id < kind_.size(); ++id) kind_[id] = kNever;
  for (int32_t id : vocab_.special_ids) {
    if (id >= 0) kind_[static_cast<size_t>(id)] = kNever;
  }
  for (int32_t id : vocab_.end_ids) {
    if (id >= 0) kind_[static_cast<size_t>(id)] = kEndToken;
  }
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_.token_bytes.size()); ++id) {
    if (kind_[static_cast<size_t>(id)] == kRegular) ids_.push_back(id);
  }
  std::sort(ids_.begin(), ids_.end(), [&](int32_t a, int32_t b) {
    const std::string& x = vocab_.token_bytes[static_cast<size_t>(a)];
    const std::string& y = vocab_.token_bytes[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  offsets_.reserve(ids_.size() + 1);
  offsets_.push_back(0);
  for (int32_t id : ids_) {
    const std::string& bytes = vocab_.token_bytes[static_cast<size_t>(id)];
    blob_ += bytes;
    offsets_.push_back(static_cast<uint32_t>(blob_.size()));
    max_len_ = std::max(max_len_, bytes.size());
  }
  const size_t n = ids_.size();
  lcp_.assign(n, 0);
  for (size_t r = 1; r < n; ++r) {
    const std::string_view a = BytesOfRank(static_cast<int32_t>(r) - 1);
    const std::string_view b = BytesOfRank(static_cast<int32_t>(r));
    uint32_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    lcp_[r] = k;
  }
  first_begin_.assign(257, static_cast<int32_t>(n));
  for (size_t r = n; r-- > 0;) {
    const std::string_view bytes = BytesOfRank(static_cast<int32_t>(r));
    if (!bytes.empty()) first_begin_[static_cast<uint8_t>(bytes[0])] = static_cast<int32_t>(r);
  }
  for (int b = 255; b >= 0; --b)  // bytes no token starts with begin where the next one does
    first_begin_[static_cast<size_t>(b)] =
        std::min(first_begin_[static_cast<size_t>(b)], first_begin_[static_cast<size_t>(b) + 1]);
  length_begin_.assign(max_len_ + 2, 0);
  for (size_t r = 0; r < n; ++r) ++length_begin_[BytesOfRank(static_cast<int32_t>(r)).size() + 1];
  for (size_t len = 1; len < length_begin_.size(); ++len)
    length_begin_[len] += length_begin_[len - 1];
  by_length_.resize(n);
  {
    std::vector<uint32_t> fill(length_begin_.begin(), length_begin_.end() - 1);
    for (size_t r = 0; r < n; ++r)
      by_length_[fill[BytesOfRank(static_cast<int32_t>(r)).size()]++] = static_cast<int32_t>(r);
  }
  len_by_rank_.assign((n + 63) / 64 * 64, 0);
  block_max_len_.assign((n + 63) / 64, 0);
  id_words_ = (static_cast<size_t>(num_ids_) + 31) / 32;
  ids_up_to_len_.assign(kShortLengths * id_words_, 0);
  for (size_t r = 0; r < n; ++r) {
    const size_t len = BytesOfRank(static_cast<int32_t>(r)).size();
    len_by_rank_[r] = static_cast<uint8_t>(std::min<size_t>(len, kLongLength));
    block_max_len_[r / 64] = std::max(block_max_len_[r / 64], static_cast<uint32_t>(len));
    if (len < kShortLengths) {
      const auto id = static_cast<size_t>(ids_[r]);
      ids_up_to_len_[len * id_words_ + id / 32] |= 1u << (id % 32);
    }
  }
  for (size_t len = 1; len < kShortLengths; ++len) {
    for (size_t w = 0; w < id_words_; ++w)
      ids_up_to_len_[len * id_words_ + w] |= ids_up_to_len_[(len - 1) * id_words_ + w];
  }
  // The next smaller value, right to left with a stack of candidates.
  smaller_.assign(n, static_cast<int32_t>(n));
  std::vector<int32_t> stack;
  for (size_t r = n; r-- > 0;) {
    while (!stack.empty() && lcp_[static_cast<size_t>(stack.back())] >= lcp_[r]) stack.pop_back();
    if (!stack.empty()) smaller_[r] = stack.back();
    stack.push_back(static_cast<int32_t>(r));
  }
}

bool VocabularyIndex::IsEnd(int32_t id) const {
  return id >= 0 && id < num_ids_ && kind_[static_cast<size_t>(id)] == kEndToken;
}

bool VocabularyIndex::IsRegular(int32_t id) const {
  return id >= 0 && id < num_ids_ && kind_[static_cast<size_t>(id)] == kRegular;
}

}  // namespace infer::grammar
