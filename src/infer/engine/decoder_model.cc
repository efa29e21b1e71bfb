#include "infer/engine/decoder_model.h"

#include <algorithm>
#include <optional>

#include "infer/cache/paged_kv_cache.h"
#include "infer/core/error.h"
#include "infer/model/decoder.h"

namespace infer {

namespace {

class DecoderModel final : public LanguageModel {
 public:
  DecoderModel(const LoadedModel& model, ThreadPool& pool, kernels::MatMulPrecision precision,
               kernels::QuantizedActivations activations)
      : decoder_(model, pool, precision, activations) {}

  int64_t vocab_size() const override { return decoder_.vocab_size(); }
  int64_t context_length() const override { return decoder_.config().max_position_embeddings; }
  int64_t kv_bytes_per_token(DType kv_dtype) const override {
    return decoder_.config().KvCacheBytesPerToken(kv_dtype);
  }
  int64_t recurrent_state_bytes() const override { return decoder_.config().RecurrentStateBytes(); }

  void AllocateKvCache(int64_t num_blocks, int64_t block_size, DType kv_dtype, bool use_kv_cache,
                       int64_t state_slots) override {
    cache_.reset();  // free the old pool before allocating the new one
    if (use_kv_cache) {
      cache_.emplace(PagedKvCache::FromModelConfig(decoder_.config(), num_blocks, block_size,
                                                   kv_dtype, std::max<int64_t>(1, state_slots)));
    }
  }

  void CopyKvBlock(int32_t source, int32_t destination) override {
    INFER_CHECK(cache_.has_value(), "copy of a KV block without a KV cache");
    cache_->CopyBlock(source, destination);
  }

  void CopyState(int64_t source, int64_t destination) override {
    INFER_CHECK(cache_.has_value(), "copy of a state slot without a KV cache");
    cache_->CopyState(source, destination);
  }

  void EnableStateCheckpoints(int64_t slots, int64_t max_tokens) override {
    const ModelConfig& config = decoder_.config();
    if (!cache_ || config.num_linear_layers() == 0) return;
    cache_->AllocateCheckpoints(slots, max_tokens,
                                config.linear.conv_dim() + 2 * config.linear.value_heads);
  }

  int64_t kv_cache_bytes() const override { return cache_ ? cache_->memory_bytes() : 0; }

  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    if (!cache_) {
      // Uncached: each sequence from scratch, last position only (speculation needs the cache:
      // EngineConfig::Validate).
      logits.clear();
      for (const SequenceStep& step : steps) {
        if (!step.wants_logits) continue;
        INFER_CHECK(step.num_logits == 1, "sequence {}: {} logits rows without a KV cache",
                    step.seq_id, step.num_logits);
        decoder_.ForwardUncached(step.tokens, LogitsMode::kLastPosition, row_, step.lora);
        logits.insert(logits.end(), row_.begin(), row_.end());
      }
      return;
    }
    seqs_.clear();
    for (const SequenceStep& step : steps) {
      const auto num_old = static_cast<int64_t>(step.tokens.size()) - step.num_new;
      INFER_CHECK(step.num_new >= 1 && num_old >= 0, "sequence {}: {} new tokens of {}",
                  step.seq_id, step.num_new, step.tokens.size());
      INFER_CHECK(!step.wants_logits || (step.num_logits >= 1 && step.num_logits <= step.num_new),
                  "sequence {}: {} logits rows for {} new tokens", step.seq_id, step.num_logits,
                  step.num_new);
      seqs_.push_back({step.tokens.subspan(static_cast<size_t>(num_old)), num_old, step.block_table,
                       step.wants_logits ? LogitsMode::kLastPosition : LogitsMode::kNone,
                       step.num_logits, step.lora, step.state_slot});
    }
    decoder_.Forward(seqs_, *cache_, logits);
  }

 private:
  Decoder decoder_;
  std::optional<PagedKvCache> cache_;
  std::vector<SequenceTokens> seqs_;
  std::vector<float> row_;
};

}  // namespace

std::unique_ptr<LanguageModel> MakeDecoderModel(const LoadedModel& model, ThreadPool& pool,
                                                kernels::MatMulPrecision precision,
                                                kernels::QuantizedActivations activations) {
  return std::make_unique<DecoderModel>(model, pool, precision, activations);
}

}  // namespace infer
