// The contiguous KV cache: post-RoPE keys and values of every layer for a batch of
// sequences, laid out [layers, batch, kv_heads, max_seq_len, head_dim] in f32, with a fill
// length per sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "infer/core/tensor.h"
#include "infer/loader/model_config.h"

namespace infer {

class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t batch_size, int64_t num_kv_heads, int64_t max_seq_len,
          int64_t head_dim);
  static KvCache FromModelConfig(const ModelConfig& config, int64_t batch_size,
                                 int64_t max_seq_len);

  int64_t num_layers() const { return num_layers_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  int64_t head_dim() const { return head_dim_; }
  // Elements between one kv head and the next inside a (layer, sequence) block.
  int64_t kv_head_stride() const { return max_seq_len_ * head_dim_; }

  // The [kv_heads, max_seq_len, head_dim] block of one layer and sequence.
  float* Keys(int64_t layer_idx, int64_t seq_idx);
  float* Values(int64_t layer_idx, int64_t seq_idx);

  // Positions filled for a sequence (the same for every layer between forward calls).
  int64_t seq_len(int64_t seq_idx = 0) const { return seq_lens_.at(static_cast<size_t>(seq_idx)); }
  // Writes K and V rows ([num_tokens, kv_heads * head_dim], row-major) of one layer at
  // positions seq_len .. seq_len + num_tokens - 1; does not advance.
  void Update(int64_t layer_idx, int64_t seq_idx, const float* k, const float* v,
              int64_t num_tokens);
  void Advance(int64_t seq_idx, int64_t num_tokens);
  void Reset(int64_t seq_idx);

  int64_t memory_bytes() const {
    return static_cast<int64_t>(keys_.size_bytes() + values_.size_bytes());
  }

 private:
  size_t BlockOffset(int64_t layer_idx, int64_t seq_idx) const;

  int64_t num_layers_, batch_size_, num_kv_heads_, max_seq_len_, head_dim_;
  Tensor keys_;
  Tensor values_;
  std::vector<int64_t> seq_lens_;
};

}  // namespace infer
