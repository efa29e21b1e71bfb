#include "infer/engine/decoder_model.h"

#include <optional>

#include "infer/cache/kv_cache.h"
#include "infer/core/error.h"
#include "infer/model/decoder.h"

namespace infer {

namespace {

class DecoderModel final : public LanguageModel {
 public:
  DecoderModel(const LoadedModel& model, ThreadPool& pool, kernels::MatMulPrecision precision)
      : decoder_(model, pool, precision) {}

  int64_t vocab_size() const override { return decoder_.vocab_size(); }
  int64_t context_length() const override { return decoder_.config().max_position_embeddings; }

  void StartSequences(int64_t num_seqs, int64_t max_seq_len, bool use_kv_cache) override {
    cache_.reset();  // free the old cache before allocating the new one
    if (use_kv_cache)
      cache_.emplace(KvCache::FromModelConfig(decoder_.config(), num_seqs, max_seq_len));
  }

  void NextTokenLogits(int64_t seq_idx, std::span<const int32_t> tokens, int64_t num_new,
                       std::vector<float>& logits) override {
    if (!cache_) {
      decoder_.ForwardUncached(tokens, LogitsMode::kLastPosition, logits);
      return;
    }
    const auto num_old = static_cast<int64_t>(tokens.size()) - num_new;
    INFER_CHECK(num_new >= 1 && cache_->seq_len(seq_idx) == num_old,
                "sequence {}: the cache holds {} tokens, the caller has {} before the new ones",
                seq_idx, cache_->seq_len(seq_idx), num_old);
    decoder_.Forward(tokens.subspan(static_cast<size_t>(num_old)), *cache_, seq_idx,
                     LogitsMode::kLastPosition, logits);
  }

  void BatchNextTokenLogits(std::span<const SequenceStep> steps,
                            std::vector<float>& logits) override {
    if (!cache_) {
      LanguageModel::BatchNextTokenLogits(steps, logits);
      return;
    }
    std::vector<SequenceTokens> seqs;
    seqs.reserve(steps.size());
    for (const SequenceStep& step : steps) {
      const auto num_old = static_cast<int64_t>(step.tokens.size()) - step.num_new;
      INFER_CHECK(step.num_new >= 1 && cache_->seq_len(step.seq_idx) == num_old,
                  "sequence {}: the cache holds {} tokens, the caller has {} before the new ones",
                  step.seq_idx, cache_->seq_len(step.seq_idx), num_old);
      seqs.push_back({step.seq_idx, step.tokens.subspan(static_cast<size_t>(num_old))});
    }
    decoder_.ForwardBatch(seqs, *cache_, logits);
  }

  int64_t kv_cache_bytes() const override { return cache_ ? cache_->memory_bytes() : 0; }

 private:
  Decoder decoder_;
  std::optional<KvCache> cache_;
};

}  // namespace

std::unique_ptr<LanguageModel> MakeDecoderModel(const LoadedModel& model, ThreadPool& pool,
                                                kernels::MatMulPrecision precision) {
  return std::make_unique<DecoderModel>(model, pool, precision);
}

}  // namespace infer
