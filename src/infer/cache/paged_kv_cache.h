// The paged KV cache: one pool of fixed-size blocks shared by every layer that keeps K and V
// (block b holds block_size positions of every such layer's keys and values), post-RoPE, in f32
// or bf16. Which blocks a sequence uses is the block manager's business; this class stores and
// writes them. Beside the blocks, a model with linear-attention layers keeps each sequence's
// recurrent state in f32 slots of a fixed size, one per sequence that runs at once.
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
  // The KV layers of `config` (ModelConfig::num_kv_layers) and, for a model with linear layers,
  // `state_slots` recurrent-state slots (ModelConfig::RecurrentStateBytes each).
  static PagedKvCache FromModelConfig(const ModelConfig& config, int64_t num_blocks,
                                      int64_t block_size, DType dtype, int64_t state_slots = 1);
  // Bytes one block takes across all layers.
  static int64_t BlockBytes(const ModelConfig& config, int64_t block_size, DType dtype);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t memory_bytes() const {
    const auto bytes = [](const Tensor& t) { return t.defined() ? t.size_bytes() : 0; };
    return static_cast<int64_t>(storage_.size_bytes() + bytes(state_) + bytes(checkpoint_state_) +
                                bytes(checkpoint_inputs_));
  }

  // Recurrent state: `slots` slots of `floats_per_layer` f32 values in each of `layers` layers,
  // zeroed (replacing any before).
  void AllocateStates(int64_t layers, int64_t slots, int64_t floats_per_layer);
  int64_t num_state_slots() const { return state_slots_; }
  // Slot `slot`'s state in state layer `layer` (floats_per_layer values).
  float* State(int64_t layer, int64_t slot);
  // Zeroes slot `slot` in every state layer (a sequence that starts at position 0).
  void ClearState(int64_t slot);
  // Copies slot `source` to `destination` in every state layer (a state snapshot).
  void CopyState(int64_t source, int64_t destination);

  // Draft checks on a model with state: for each of the first `slots` slots, the state before
  // its latest step of several tokens (a draft's check) and that step's inputs, `input_floats`
  // per token and layer for up to `max_tokens` tokens, so that a sequence that keeps only the
  // first of them goes back to the state after those (the decoder replays them). ClearState
  // and CopyState into a slot drop its checkpoint.
  void AllocateCheckpoints(int64_t slots, int64_t max_tokens, int64_t input_floats);
  struct Checkpoint {
    int64_t begin = -1;  // the step's positions [begin, end); -1: none
    int64_t end = -1;
  };
  int64_t checkpoint_slots() const { return checkpoint_slots_; }
  int64_t checkpoint_tokens() const { return checkpoint_tokens_; }
  Checkpoint& checkpoint(int64_t slot);
  float* CheckpointState(int64_t layer, int64_t slot);
  float* CheckpointInputs(int64_t layer, int64_t slot);  // [max_tokens][input_floats]

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
  int64_t state_layers_ = 0, state_slots_ = 0, state_floats_ = 0;
  Tensor state_;  // [state_layers][state_slots][state_floats], f32
  int64_t checkpoint_slots_ = 0, checkpoint_tokens_ = 0, checkpoint_input_floats_ = 0;
  std::vector<Checkpoint> checkpoints_;
  Tensor checkpoint_state_;   // [state_layers][checkpoint_slots][state_floats]
  Tensor checkpoint_inputs_;  // [state_layers][checkpoint_slots][tokens][input_floats]
};

}  // namespace infer
