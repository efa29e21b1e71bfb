#include "infer/cache/paged_kv_cache.h"

#include <cstring>

#include "infer/core/error.h"

namespace infer {

DType ParseKvCacheDType(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  Fail("KV cache dtype '{}' is not one of f32, bf16", name);
}

PagedKvCache::PagedKvCache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim,
                           int64_t num_blocks, int64_t block_size, DType dtype)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      num_blocks_(num_blocks),
      block_size_(block_size),
      dtype_(dtype),
      block_elements_(num_kv_heads * block_size * head_dim) {
  INFER_CHECK(num_layers > 0 && num_kv_heads > 0 && head_dim > 0 && num_blocks > 0,
              "KV cache dimensions must be positive (layers {}, kv heads {}, head_dim {}, blocks "
              "{})",
              num_layers, num_kv_heads, head_dim, num_blocks);
  INFER_CHECK(block_size > 0 && block_size % kernels::kPagedBlockMultiple == 0,
              "KV cache block_size must be a positive multiple of {} (the attention kernel "
              "reads 16 consecutive positions of one block at a time), got {}",
              kernels::kPagedBlockMultiple, block_size);
  INFER_CHECK(dtype == DType::kF32 || dtype == DType::kBF16,
              "KV cache dtype must be f32 or bf16, got {}", DTypeName(dtype));
  const Shape shape = {num_layers, 2, num_blocks, block_elements_};
  // 2 MiB pages: attention streams the cache every step, and 4 KiB pages cost TLB misses.
  storage_ = Tensor::Empty(dtype, shape, /*huge_pages=*/true);
}

PagedKvCache PagedKvCache::FromModelConfig(const ModelConfig& config, int64_t num_blocks,
                                           int64_t block_size, DType dtype, int64_t state_slots) {
  PagedKvCache cache(config.num_kv_layers(), config.num_kv_heads, config.head_dim, num_blocks,
                     block_size, dtype);
  if (config.num_linear_layers() > 0) {
    cache.AllocateStates(config.num_linear_layers(), state_slots, config.linear.state_floats());
  }
  return cache;
}

void PagedKvCache::AllocateStates(int64_t layers, int64_t slots, int64_t floats_per_layer) {
  INFER_CHECK(layers > 0 && slots > 0 && floats_per_layer > 0,
              "recurrent state dimensions must be positive (layers {}, slots {}, floats {})",
              layers, slots, floats_per_layer);
  state_ = Tensor();
  state_ = Tensor::Empty(DType::kF32, {layers, slots, floats_per_layer}, /*huge_pages=*/true);
  state_layers_ = layers;
  state_slots_ = slots;
  state_floats_ = floats_per_layer;
}

float* PagedKvCache::State(int64_t layer, int64_t slot) {
  INFER_CHECK(layer >= 0 && layer < state_layers_ && slot >= 0 && slot < state_slots_,
              "recurrent state: layer {} slot {} is outside {} layers of {} slots", layer, slot,
              state_layers_, state_slots_);
  return state_.data<float>() + (layer * state_slots_ + slot) * state_floats_;
}

void PagedKvCache::CopyState(int64_t source, int64_t destination) {
  for (int64_t layer = 0; layer < state_layers_; ++layer) {
    std::memcpy(State(layer, destination), State(layer, source),
                static_cast<size_t>(state_floats_) * sizeof(float));
  }
  if (destination < checkpoint_slots_) checkpoints_[static_cast<size_t>(destination)] = {};
}

void PagedKvCache::AllocateCheckpoints(int64_t slots, int64_t max_tokens, int64_t input_floats) {
  INFER_CHECK(
      state_layers_ > 0 && slots > 0 && slots <= state_slots_ && max_tokens > 0 && input_floats > 0,
      "state checkpoints: {} slots of {} tokens for {} state slots", slots, max_tokens,
      state_slots_);
  checkpoint_slots_ = slots;
  checkpoint_tokens_ = max_tokens;
  checkpoint_input_floats_ = input_floats;
  checkpoints_.assign(static_cast<size_t>(slots), {});
  checkpoint_state_ = Tensor::Empty(DType::kF32, {state_layers_, slots, state_floats_}, true);
  checkpoint_inputs_ =
      Tensor::Empty(DType::kF32, {state_layers_, slots, max_tokens * input_floats}, true);
}

PagedKvCache::Checkpoint& PagedKvCache::checkpoint(int64_t slot) {
  INFER_CHECK(slot >= 0 && slot < checkpoint_slots_, "state checkpoint: slot {} of {}", slot,
              checkpoint_slots_);
  return checkpoints_[static_cast<size_t>(slot)];
}

float* PagedKvCache::CheckpointState(int64_t layer, int64_t slot) {
  INFER_CHECK(layer >= 0 && layer < state_layers_ && slot >= 0 && slot < checkpoint_slots_,
              "state checkpoint: layer {} slot {}", layer, slot);
  return checkpoint_state_.data<float>() + (layer * checkpoint_slots_ + slot) * state_floats_;
}

float* PagedKvCache::CheckpointInputs(int64_t layer, int64_t slot) {
  INFER_CHECK(layer >= 0 && layer < state_layers_ && slot >= 0 && slot < checkpoint_slots_,
              "state checkpoint: layer {} slot {}", layer, slot);
  return checkpoint_inputs_.data<float>() +
         (layer * checkpoint_slots_ + slot) * checkpoint_tokens_ * checkpoint_input_floats_;
}

void PagedKvCache::ClearState(int64_t slot) {
  if (slot < checkpoint_slots_) checkpoints_[static_cast<size_t>(slot)] = {};
  for (int64_t layer = 0; layer < state_layers_; ++layer) {
    std::memset(State(layer, slot), 0, static_cast<size_t>(state_floats_) * sizeof(float));
  }
}

int64_t PagedKvCache::BlockBytes(const ModelConfig& config, int64_t block_size, DType dtype) {
  return config.KvCacheBytesPerToken(dtype) * block_size;
}

int64_t PagedKvCache::BlockOffset(int64_t layer_idx, int kv, int64_t block) const {
  return ((layer_idx * 2 + kv) * num_blocks_ + block) * block_elements_;
}

kernels::PagedKvLayer PagedKvCache::Layer(int64_t layer_idx) const {
  INFER_CHECK(layer_idx >= 0 && layer_idx < num_layers_, "KV cache layer {} out of range",
              layer_idx);
  const auto element = static_cast<int64_t>(DTypeSize(dtype_));
  const auto* base = static_cast<const std::byte*>(storage_.raw());
  kernels::PagedKvLayer layer;
  layer.k = base + BlockOffset(layer_idx, 0, 0) * element;
  layer.v = base + BlockOffset(layer_idx, 1, 0) * element;
  layer.dtype = dtype_;
  layer.block_size = block_size_;
  layer.block_stride = block_elements_;
  layer.head_stride = block_size_ * head_dim_;
  return layer;
}

void PagedKvCache::Write(int64_t layer_idx, std::span<const int32_t> block_table, int64_t first_pos,
                         const float* k, const float* v, int64_t num_tokens) {
  INFER_CHECK(layer_idx >= 0 && layer_idx < num_layers_, "KV cache layer {} out of range",
              layer_idx);
  INFER_CHECK(first_pos >= 0 && num_tokens >= 0 &&
                  first_pos + num_tokens <= static_cast<int64_t>(block_table.size()) * block_size_,
              "KV cache: positions {}..{} do not fit {} blocks of {}", first_pos,
              first_pos + num_tokens, block_table.size(), block_size_);
  const int64_t kv_dim = num_kv_heads_ * head_dim_;
  for (int kv = 0; kv < 2; ++kv) {
    const float* source = kv == 0 ? k : v;
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t pos = first_pos + t;
      const int32_t block = block_table[static_cast<size_t>(pos / block_size_)];
      INFER_CHECK(block >= 0 && block < num_blocks_, "KV cache: block id {} out of range [0, {})",
                  block, num_blocks_);
      const int64_t row = BlockOffset(layer_idx, kv, block) + (pos % block_size_) * head_dim_;
      for (int64_t h = 0; h < num_kv_heads_; ++h) {
        const float* from = source + t * kv_dim + h * head_dim_;
        const int64_t to = row + h * block_size_ * head_dim_;
        if (dtype_ == DType::kF32) {
          std::memcpy(storage_.data<float>() + to, from, static_cast<size_t>(head_dim_) * 4);
        } else {
          uint16_t* out = storage_.data<uint16_t>() + to;
          for (int64_t d = 0; d < head_dim_; ++d) out[d] = F32ToBf16(from[d]);
        }
      }
    }
  }
}

void PagedKvCache::CopyBlock(int32_t source, int32_t destination) {
  INFER_CHECK(source >= 0 && source < num_blocks_ && destination >= 0 && destination < num_blocks_,
              "KV cache: copy of block {} to {} out of range [0, {})", source, destination,
              num_blocks_);
  const auto element = DTypeSize(dtype_);
  auto* base = static_cast<std::byte*>(storage_.raw());
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (int kv = 0; kv < 2; ++kv) {
      std::memcpy(base + BlockOffset(layer, kv, destination) * static_cast<int64_t>(element),
                  base + BlockOffset(layer, kv, source) * static_cast<int64_t>(element),
                  static_cast<size_t>(block_elements_) * element);
    }
  }
}

}  // namespace infer
