// The paged KV cache: one pool of fixed-size blocks shared by every layer (block b holds
// block_size positions of every layer's keys and values), post-RoPE, in f32 or bf16. Which
// blocks a sequence uses is the block manager's business; this class stores and writes them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/core/dtype.h"
#include "infer/core/tensor.h"
#include "infer/kernels/ops.h"
#include "infer/loader/model_config.h"

namespace infer {

// "f32" or "bf16"; anything else throws infer::Error naming the choices.
DType ParseKvCacheDType(std::string_view name);

class PagedKvCache {
 public:
  // Layout per layer: K [num_blocks][kv_heads][block_size][head_dim], then V the same.
  // block_size must be a multiple of kernels::kPagedBlockMultiple; dtype f32 or bf16.
  PagedKvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks,
               int64_t block_size, DType dtype);
  static PagedKvCache FromModelConfig(const ModelConfig& config, int64_t num_blocks,
                                      int64_t block_size, DType dtype);
  // Bytes one block takes across all layers.
  static int64_t BlockBytes(const ModelConfig& config, int64_t block_size, DType dtype);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t memory_bytes() const { return static_cast<int64_t>(storage_.size_bytes()); }

  // What attention reads for one layer.
  kernels::PagedKvLayer Layer(int64_t layer_idx) const;

  // Writes K and V rows ([num_tokens, kv_heads * head_dim], row-major) of one layer at
  // positions first_pos .. first_pos + num_tokens - 1 of the sequence whose blocks are
  // `block_table` (rounded to bf16, nearest even, in a bf16 cache).
  void Write(int64_t layer_idx, std::span<const int32_t> block_table, int64_t first_pos,
             const float* k, const float* v, int64_t num_tokens);

  // Copies block `source` to `destination` in every layer (a forked sequence's partial block).
  void CopyBlock(int32_t source, int32_t destination);

 private:
  // Element offset of (layer, k or v, block) in storage_.
  int64_t BlockOffset(int64_t layer_idx, int kv, int64_t block) const;

  int64_t num_layers_, num_kv_heads_, head_dim_, num_blocks_, block_size_;
  DType dtype_;
  int64_t block_elements_;  // kv_heads * block_size * head_dim
  Tensor storage_;          // [layers][2][num_blocks][block_elements]
};

}  // namespace infer
