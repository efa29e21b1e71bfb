#include "infer/cache/kv_cache.h"

#include <cstring>

#include "infer/core/error.h"

namespace infer {

KvCache::KvCache(int64_t num_layers, int64_t batch_size, int64_t num_kv_heads, int64_t max_seq_len,
                 int64_t head_dim)
    : num_layers_(num_layers),
      batch_size_(batch_size),
      num_kv_heads_(num_kv_heads),
      max_seq_len_(max_seq_len),
      head_dim_(head_dim),
      seq_lens_(static_cast<size_t>(std::max<int64_t>(batch_size, 0)), 0) {
  INFER_CHECK(
      num_layers > 0 && batch_size > 0 && num_kv_heads > 0 && max_seq_len > 0 && head_dim > 0,
      "KV cache dimensions must be positive (layers {}, batch {}, kv heads {}, max_seq_len "
      "{}, head_dim {})",
      num_layers, batch_size, num_kv_heads, max_seq_len, head_dim);
  const Shape shape = {num_layers, batch_size, num_kv_heads, max_seq_len, head_dim};
  // Large caches get 2 MiB pages: attention streams them once per decode step.
  const bool huge_pages = NumElements(shape) * 4 >= (int64_t{64} << 20);
  keys_ = Tensor::Empty(DType::kF32, shape, huge_pages);
  values_ = Tensor::Empty(DType::kF32, shape, huge_pages);
}

KvCache KvCache::FromModelConfig(const ModelConfig& config, int64_t batch_size,
                                 int64_t max_seq_len) {
  return {config.num_layers, batch_size, config.num_kv_heads, max_seq_len, config.head_dim};
}

size_t KvCache::BlockOffset(int64_t layer_idx, int64_t seq_idx) const {
  INFER_CHECK(layer_idx >= 0 && layer_idx < num_layers_ && seq_idx >= 0 && seq_idx < batch_size_,
              "KV cache index out of range (layer {}, sequence {})", layer_idx, seq_idx);
  return static_cast<size_t>((layer_idx * batch_size_ + seq_idx) * num_kv_heads_ *
                             kv_head_stride());
}

float* KvCache::Keys(int64_t layer_idx, int64_t seq_idx) {
  return keys_.data<float>() + BlockOffset(layer_idx, seq_idx);
}

float* KvCache::Values(int64_t layer_idx, int64_t seq_idx) {
  return values_.data<float>() + BlockOffset(layer_idx, seq_idx);
}

void KvCache::Update(int64_t layer_idx, int64_t seq_idx, const float* k, const float* v,
                     int64_t num_tokens) {
  const int64_t start = seq_len(seq_idx);
  INFER_CHECK(start + num_tokens <= max_seq_len_,
              "KV cache full: {} cached + {} new tokens exceed max_seq_len {}", start, num_tokens,
              max_seq_len_);
  float* keys = Keys(layer_idx, seq_idx);
  float* values = Values(layer_idx, seq_idx);
  const int64_t kv_dim = num_kv_heads_ * head_dim_;
  const size_t row_bytes = static_cast<size_t>(head_dim_) * sizeof(float);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < num_kv_heads_; ++h) {
      const int64_t destination = h * kv_head_stride() + (start + t) * head_dim_;
      std::memcpy(keys + destination, k + t * kv_dim + h * head_dim_, row_bytes);
      std::memcpy(values + destination, v + t * kv_dim + h * head_dim_, row_bytes);
    }
  }
}

void KvCache::Advance(int64_t seq_idx, int64_t num_tokens) {
  INFER_CHECK(seq_len(seq_idx) + num_tokens <= max_seq_len_, "KV cache advance past max_seq_len {}",
              max_seq_len_);
  seq_lens_[static_cast<size_t>(seq_idx)] += num_tokens;
}

void KvCache::Reset(int64_t seq_idx) { seq_lens_.at(static_cast<size_t>(seq_idx)) = 0; }

}  // namespace infer
