// What the engine needs from a model: next-token logits for a step of several sequences, with
// their K/V kept in a paged cache whose blocks the engine assigns. The decoder implements it
// (decoder_model.h); tests implement it with scripted models that ignore the cache, as vLLM's
// scheduler tests do.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/core/dtype.h"
#include "infer/loader/lora.h"

namespace infer {

// One sequence's share of a step.
struct SequenceStep {
  int64_t seq_id = 0;               // stable for the request's life (mocks and logs key on it)
  std::span<const int32_t> tokens;  // the sequence's tokens so far, through the last new one
  int64_t num_new = 0;              // the last num_new tokens run now; the cache holds the rest
  std::span<const int32_t> block_table;  // covers every token of `tokens`
  bool wants_logits = true;              // false for a prompt chunk that does not end the prompt
  // With wants_logits: rows for the last num_logits tokens (more than one when a speculative
  // draft is checked), at most num_new.
  int64_t num_logits = 1;
  const LoraAdapter* lora = nullptr;  // the adapter its projections add (null: none)
  // Its recurrent-state slot (a model with recurrent_state_bytes() > 0), held from its first
  // token to its last: the state its earlier tokens left, which it starts afresh at token 0.
  int64_t state_slot = 0;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual int64_t vocab_size() const = 0;
  // Longest sequence (prompt + generated) the model supports.
  virtual int64_t context_length() const = 0;

  // K and V bytes one token takes across all layers at `kv_dtype` (0: the model keeps none).
  virtual int64_t kv_bytes_per_token(DType /*kv_dtype*/) const { return 0; }
  // Bytes of one sequence's recurrent state (linear-attention layers; 0: none). Such a model
  // cannot resume a sequence from cached K/V alone: the engine gives each running sequence a
  // state slot, checkpoints its state for draft checks, and resumes cached prefixes from state
  // snapshots.
  virtual int64_t recurrent_state_bytes() const { return 0; }
  // (Re)allocates the block pool the block tables index: num_blocks blocks of block_size
  // positions in `kv_dtype`, and state_slots recurrent-state slots (recurrent_state_bytes() >
  // 0). With use_kv_cache false the model keeps no cache and recomputes every sequence from its
  // first token each step (the oracle, --no-kv-cache).
  virtual void AllocateKvCache(int64_t /*num_blocks*/, int64_t /*block_size*/, DType /*kv_dtype*/,
                               bool /*use_kv_cache*/, int64_t /*state_slots*/) {}
  // Copies one block's K/V to another (a forked sequence's partial block).
  virtual void CopyKvBlock(int32_t /*source*/, int32_t /*destination*/) {}
  // Copies one recurrent-state slot to another (a prefix cache's state snapshot, taken or
  // restored).
  virtual void CopyState(int64_t /*source*/, int64_t /*destination*/) {}
  // Draft checks on a model with recurrent state: the first `slots` state slots keep the state
  // before a check of up to `max_tokens` tokens, so that a sequence that keeps only some of
  // them continues from the state after those (after AllocateKvCache).
  virtual void EnableStateCheckpoints(int64_t /*slots*/, int64_t /*max_tokens*/) {}
  // Bytes the KV pool holds (0 without one).
  virtual int64_t kv_cache_bytes() const { return 0; }

  // Runs one step: every sequence's new tokens in one batched forward. `logits` receives f32
  // rows of `vocab` values: for each step with wants_logits, in order, its last num_logits
  // tokens' rows, in position order.
  virtual void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) = 0;
};

}  // namespace infer
