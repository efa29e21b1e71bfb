#include "infer/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "infer/core/error.h"

namespace infer {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// A uniform double in [0, 1) from the top 53 bits: defined here rather than through
// std::uniform_real_distribution, whose algorithm differs between standard libraries.
double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11U) * 0x1.0p-53; }

}  // namespace

void ApplyRepetitionPenalty(std::span<float> logits, std::span<const int32_t> context_ids,
                            double penalty) {
  if (penalty == 1.0 || context_ids.empty()) return;
  std::vector<int32_t> unique_ids(context_ids.begin(), context_ids.end());
  std::sort(unique_ids.begin(), unique_ids.end());
  unique_ids.erase(std::unique(unique_ids.begin(), unique_ids.end()), unique_ids.end());
  const auto vocab = static_cast<int64_t>(logits.size());
  const auto factor = static_cast<float>(penalty);
  for (const int32_t id : unique_ids) {
    if (id < 0 || id >= vocab) continue;
    float& logit = logits[static_cast<size_t>(id)];
    logit = logit > 0.0F ? logit / factor : logit * factor;
  }
}

void ApplyTemperature(std::span<float> logits, double temperature) {
  INFER_CHECK(temperature > 0.0, "ApplyTemperature: temperature must be > 0, got {}", temperature);
  if (temperature == 1.0) return;
  const auto scale = static_cast<float>(1.0 / temperature);
  for (float& logit : logits) logit *= scale;
}

void ApplyTopK(std::span<float> logits, int64_t k) {
  INFER_CHECK(k >= 1, "ApplyTopK: k must be >= 1, got {}", k);
  if (k >= static_cast<int64_t>(logits.size())) return;
  float threshold = 0.0F;  // the k-th largest value, counted with multiplicity
  constexpr int64_t kMaxHeap = 256;
  if (k <= kMaxHeap) {
    // A min-heap of the k largest so far: one comparison for most of a row.
    std::vector<float> heap(logits.begin(), logits.begin() + k);
    std::make_heap(heap.begin(), heap.end(), std::greater<>());
    for (size_t i = static_cast<size_t>(k); i < logits.size(); ++i) {
      if (!(logits[i] > heap.front())) continue;
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = logits[i];
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
    threshold = heap.front();
  } else {
    std::vector<float> values(logits.begin(), logits.end());
    const auto kth = values.begin() + (k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<>());
    threshold = *kth;
  }
  for (float& logit : logits) {
    if (logit < threshold) logit = kMasked;
  }
}

// The nucleus of ApplyTopP is the shortest prefix of the order (logit descending, lower id first
// among equals) whose sum of probabilities, added in that order in double, reaches p. Sorting
// the whole order is O(n log n) per draw, and a flat distribution's nucleus is most of the
// vocabulary; so the prefix is found by a histogram over the logits' order-preserving bit keys
// (a pass of radix selection), and only the one bucket where the sum crosses p is sorted.
// The histogram sums in a different order than the sorted one, so the crossing is accepted only
// where it holds with a margin above both sums' rounding bounds; closer calls (and buckets too
// large to sort cheaply) take the full sort. Either way the kept set is the sort's, bit for bit.
namespace {

// A float's bits mapped so that unsigned order is float order (for non-NaN values); -0 and +0
// share a key, as they compare equal.
uint32_t OrderKey(float value) {
  if (value == 0.0F) value = 0.0F;
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return (bits & 0x80000000U) != 0 ? ~bits : bits | 0x80000000U;
}

constexpr int kBucketShift = 16;  // sign, exponent and 7 mantissa bits choose the bucket
constexpr size_t kBuckets = size_t{1} << (32 - kBucketShift);

struct TopPBucket {
  double mass = 0.0;  // sum of exp(logit - max) over the bucket
  uint32_t count = 0;
};

// ApplyTopP by its definition, the order sorted as far as the sum needs: the reference that the
// histogram defers to on close calls.
void TopPBySorting(std::span<float> logits, double p) {
  std::vector<int32_t> order;
  order.reserve(logits.size());
  float max_logit = kMasked;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kMasked) continue;
    order.push_back(static_cast<int32_t>(i));
    max_logit = std::max(max_logit, logits[i]);
  }
  if (order.empty()) return;
  double total = 0.0;
  for (const int32_t id : order) total += std::exp(static_cast<double>(logits[id] - max_logit));
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // Sort only as far as needed: peaked distributions reach p within a few tokens.
  size_t sorted = 0;
  size_t keep = order.size();
  double cumulative = 0.0;
  for (size_t want = 64; sorted < order.size(); want *= 4) {
    const size_t end = std::min(want, order.size());
    std::partial_sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                      order.begin() + static_cast<std::ptrdiff_t>(end), order.end(), by_logit);
    for (; sorted < end; ++sorted) {
      cumulative += std::exp(static_cast<double>(logits[order[sorted]] - max_logit)) / total;
      if (cumulative >= p) break;
    }
    if (sorted < end) {
      keep = sorted + 1;
      break;
    }
  }
  for (size_t i = keep; i < order.size(); ++i) logits[static_cast<size_t>(order[i])] = kMasked;
}

using Candidates = SamplingCandidates;

void CollectCandidates(std::span<const float> logits, Candidates& out) {
  out.ids.clear();
  out.best = -1;
  out.max_logit = kMasked;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kMasked) continue;
    out.ids.push_back(static_cast<int32_t>(i));
    if (out.best < 0 || logits[i] > out.max_logit) {
      out.best = static_cast<int32_t>(i);
      out.max_logit = logits[i];
    }
  }
}

void ExpWeights(std::span<const float> logits, Candidates& candidates) {
  candidates.weights.resize(candidates.ids.size());
  for (size_t j = 0; j < candidates.ids.size(); ++j) {
    candidates.weights[j] = std::exp(
        static_cast<double>(logits[static_cast<size_t>(candidates.ids[j])] - candidates.max_logit));
  }
}

// Keeps the candidates (and their weights) for which keep(j) holds; masks the others' logits.
template <typename Keep>
void KeepCandidates(std::span<float> logits, Candidates& candidates, Keep keep) {
  size_t kept = 0;
  for (size_t j = 0; j < candidates.ids.size(); ++j) {
    if (keep(j)) {
      candidates.ids[kept] = candidates.ids[j];
      candidates.weights[kept] = candidates.weights[j];
      ++kept;
    } else {
      logits[static_cast<size_t>(candidates.ids[j])] = kMasked;
    }
  }
  candidates.ids.resize(kept);
  candidates.weights.resize(kept);
}

// The candidates' weights (exp(logit - max_logit)), each one's bucket, and the buckets' mass
// and count; returns the total weight, summed in the same (index) order as the sorted path's.
double FillTopPHistogram(std::span<const float> logits, Candidates& candidates,
                         std::vector<TopPBucket>& buckets, std::vector<uint16_t>& bucket_of) {
  const std::vector<int32_t>& ids = candidates.ids;
  bucket_of.resize(ids.size());
  candidates.weights.resize(ids.size());
  double total = 0.0;
  for (size_t j = 0; j < ids.size(); ++j) {
    const float logit = logits[static_cast<size_t>(ids[j])];
    const double weight = std::exp(static_cast<double>(logit - candidates.max_logit));
    candidates.weights[j] = weight;
    total += weight;
    const auto bucket = static_cast<uint16_t>(OrderKey(logit) >> kBucketShift);
    bucket_of[j] = bucket;
    buckets[bucket].mass += weight;
    ++buckets[bucket].count;
  }
  return total;
}

// `members` (the crossing bucket's candidates) sorted as the full sort orders them, and the
// index of the last one the nucleus keeps, given the mass `above` of the higher buckets; nullopt
// where the sums' rounding `margin` leaves it in doubt (the full sort then decides).
std::optional<size_t> LastKeptMember(std::span<const float> logits, const Candidates& candidates,
                                     std::vector<uint32_t>& members, double above, double total,
                                     double p, double margin) {
  const std::vector<int32_t>& ids = candidates.ids;
  std::sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) {
    const float la = logits[static_cast<size_t>(ids[a])];
    const float lb = logits[static_cast<size_t>(ids[b])];
    return la > lb || (la == lb && a < b);
  });
  double cumulative = above;
  for (size_t last = 0; last < members.size(); ++last) {
    const double before = cumulative;
    cumulative += candidates.weights[members[last]];
    if (cumulative / total >= p) {
      // Taken only where every shorter prefix is surely below p and this one surely reaches it.
      if (before / total >= p - margin || cumulative / total < p + margin) return std::nullopt;
      return last;
    }
  }
  return std::nullopt;
}

// ApplyTopP over collected candidates, whose weights it computes; drops the masked ones. The
// nucleus keeps the largest logit, so `best` and `max_logit` stay the draw's.
void TopP(std::span<float> logits, double p, Candidates& candidates) {
  const std::vector<int32_t>& ids = candidates.ids;
  if (ids.empty()) return;
  float min_logit = candidates.max_logit;
  for (const int32_t id : ids) min_logit = std::min(min_logit, logits[static_cast<size_t>(id)]);
  const uint32_t top_bucket = OrderKey(candidates.max_logit) >> kBucketShift;
  const uint32_t low_bucket = OrderKey(min_logit) >> kBucketShift;
  thread_local std::vector<TopPBucket> buckets(kBuckets);
  thread_local std::vector<uint16_t> bucket_of;  // each candidate's bucket
  std::fill(buckets.begin() + low_bucket, buckets.begin() + top_bucket + 1, TopPBucket{});
  const double total = FillTopPHistogram(logits, candidates, buckets, bucket_of);
  // Bound on |histogram sum - sorted sum| of any prefix (each at most about 1): the sorted
  // path's recursive sum of up to n terms and each term's division, and the sums here over
  // tokens (n) and buckets, in units of DBL_EPSILON, with a factor of 4 to spare.
  const auto n = static_cast<double>(ids.size());
  const double margin = 4.0 * (3.0 * n + static_cast<double>(top_bucket - low_bucket) + 4.0) *
                        std::numeric_limits<double>::epsilon();
  double above = 0.0;  // the mass of the buckets above `crossing`
  uint32_t crossing = top_bucket;
  for (;; --crossing) {
    const TopPBucket& bucket = buckets[crossing];
    if ((above + bucket.mass) / total >= p || crossing == low_bucket) break;
    above += bucket.mass;
  }
  const auto by_sorting = [&] {
    TopPBySorting(logits, p);
    KeepCandidates(logits, candidates,
                   [&](size_t j) { return logits[static_cast<size_t>(ids[j])] != kMasked; });
  };
  constexpr uint32_t kMaxSortedBucket = 8192;
  if (buckets[crossing].count > kMaxSortedBucket) return by_sorting();
  std::vector<uint32_t> members;  // the crossing bucket's candidates
  members.reserve(buckets[crossing].count);
  for (size_t j = 0; j < ids.size(); ++j) {
    if (bucket_of[j] == crossing) members.push_back(static_cast<uint32_t>(j));
  }
  const std::optional<size_t> last =
      LastKeptMember(logits, candidates, members, above, total, p, margin);
  if (!last) return by_sorting();
  // Dropped: bucket 0, below every number's bucket (its keys are NaNs').
  for (size_t m = *last + 1; m < members.size(); ++m) bucket_of[members[m]] = 0;
  KeepCandidates(logits, candidates, [&](size_t j) { return bucket_of[j] >= crossing; });
}

// SampleFromLogits's inverse-CDF draw over the candidates: every other token weighs 0 there,
// and adding 0 leaves each sum as it was.
int32_t Draw(const Candidates& candidates, std::mt19937_64& rng) {
  INFER_CHECK(candidates.best >= 0, "sampling: every token is masked");
  double total = 0.0;
  for (const double weight : candidates.weights) total += weight;
  const double target = UniformUnit(rng) * total;
  double cumulative = 0.0;
  int32_t last_possible = candidates.best;
  for (size_t j = 0; j < candidates.ids.size(); ++j) {
    if (candidates.weights[j] == 0.0) continue;
    cumulative += candidates.weights[j];
    last_possible = candidates.ids[j];
    if (target < cumulative) return last_possible;
  }
  return last_possible;  // rounding left target at the very top
}

}  // namespace

void ApplyTopP(std::span<float> logits, double p) {
  if (p >= 1.0) return;
  Candidates candidates;
  CollectCandidates(logits, candidates);
  TopP(logits, p, candidates);
}

void ApplyTokenMask(std::span<float> logits, std::span<const uint32_t> mask) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t word = 0; word * 32 < logits.size(); ++word) {
    const uint32_t bits = word < mask.size() ? mask[word] : 0;
    if (bits == 0xFFFFFFFFU) continue;  // the common case away from the grammar's edges
    const size_t end = std::min(logits.size(), word * 32 + 32);
    for (size_t i = word * 32; i < end; ++i) {
      if (((bits >> (i - word * 32)) & 1U) == 0) logits[i] = minus_inf;
    }
  }
}

void ApplyLogitBias(std::span<float> logits, const std::map<int32_t, double>& bias) {
  for (const auto& [id, value] : bias) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    logits[static_cast<size_t>(id)] += static_cast<float>(value);
  }
}

void ApplyPresenceFrequencyPenalty(std::span<float> logits, std::span<const int32_t> generated_ids,
                                   double presence, double frequency) {
  if ((presence == 0.0 && frequency == 0.0) || generated_ids.empty()) return;
  std::vector<int32_t> ids(generated_ids.begin(), generated_ids.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    const int32_t id = ids[i];
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
      logits[static_cast<size_t>(id)] -=
          static_cast<float>(presence + static_cast<double>(j - i) * frequency);
    }
    i = j;
  }
}

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k) {
  INFER_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(),
              "ComputeLogprobs: token {} outside the {} logits", token, logits.size());
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double total = 0.0;
  for (const float logit : logits) total += std::exp(static_cast<double>(logit - max_logit));
  const double log_total = static_cast<double>(max_logit) + std::log(total);
  const auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_total);
  };
  TokenLogprobs result;
  result.token_id = token;
  result.logprob = logprob(token);
  const auto count = static_cast<size_t>(std::clamp<int64_t>(k, 0, std::ssize(logits)));
  if (count > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
        [&](int32_t a, int32_t b) {
          return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                 (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
        });
    for (size_t i = 0; i < count; ++i) result.top.emplace_back(order[i], logprob(order[i]));
  }
  return result;
}

int32_t Argmax(std::span<const float> logits) {
  INFER_CHECK(!logits.empty(), "Argmax: empty logits");
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t SampleFromLogits(std::span<const float> logits, std::mt19937_64& rng) {
  Candidates candidates;
  CollectCandidates(logits, candidates);
  ExpWeights(logits, candidates);
  return Draw(candidates, rng);
}

Sampler::Sampler(const SamplingParams& params)
    : temperature_(params.temperature),
      top_p_(params.top_p),
      top_k_(params.top_k),
      rng_(params.seed ? *params.seed : std::random_device{}()) {
  params.Validate();
}

int32_t Sampler::Sample(std::span<float> logits) {
  int32_t token = 0;
  if (temperature_ == 0.0) {
    token = Argmax(logits);
  } else {
    ApplyTemperature(logits, temperature_);
    if (top_k_) ApplyTopK(logits, *top_k_);
    // ApplyTopP then SampleFromLogits, over the unmasked tokens only and with one exp each.
    CollectCandidates(logits, candidates_);
    if (top_p_ < 1.0) {
      TopP(logits, top_p_, candidates_);
    } else {
      ExpWeights(logits, candidates_);
    }
    token = Draw(candidates_, rng_);
  }
  return token;
}

}  // namespace infer
