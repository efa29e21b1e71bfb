#include "infer/engine/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>

#include "infer/core/error.h"
#include "infer/kernels/ops.h"

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
    constexpr size_t kChunk = 32;
    for (size_t chunk = static_cast<size_t>(k); chunk < logits.size(); chunk += kChunk) {
      const size_t end = std::min(logits.size(), chunk + kChunk);
      // Past the first few chunks, most hold nothing above the heap's least: a branch-free
      // (vectorized) count tells first.
      const float least = heap.front();
      uint32_t above = 0;
      for (size_t i = chunk; i < end; ++i) above += logits[i] > least ? 1U : 0U;
      if (above == 0) continue;
      for (size_t i = chunk; i < end; ++i) {
        if (!(logits[i] > heap.front())) continue;
        std::pop_heap(heap.begin(), heap.end(), std::greater<>());
        heap.back() = logits[i];
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    }
    threshold = heap.front();
  } else {
    std::vector<float> values(logits.begin(), logits.end());
    const auto kth = values.begin() + (k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<>());
    threshold = *kth;
  }
  for (float& logit : logits) logit = logit < threshold ? kMasked : logit;
}

// The nucleus of ApplyTopP is the shortest prefix of the order (logit descending, lower id first
// among equals) whose sum of probabilities, added in that order in double, reaches p. Sorting
// the whole order is O(n log n) per draw, and a flat distribution's nucleus is most of the
// vocabulary; so the prefix is found by a histogram over max - logit (equal widths from the
// largest logit to the smallest, so bucket order is logit order), and only the one bucket where
// the sum crosses p is sorted. The histogram sums in a different order than the sorted one, and
// its weights are ExpShifted's, so the crossing is accepted only where it holds with a margin
// above both sums' error bounds; closer calls (and buckets too large to sort cheaply) take the
// full sort. Either way the kept set is the sort's, bit for bit.
namespace {

constexpr uint32_t kBuckets = 4096;  // the masses, 32 KiB, stay in L1

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
  const size_t size = logits.size();
  out.ids.resize(size);
  out.best = -1;
  out.max_logit = kMasked;
  out.rank.clear();  // no top-p yet: every candidate is kept
  const kernels::RowExtremes extremes = kernels::Extremes(logits.data(), std::ssize(logits));
  size_t count = 0;
  if (!extremes.has_nan && extremes.num_neg_inf == 0) {
    if (out.identity_ids != size) std::iota(out.ids.begin(), out.ids.end(), 0);
    out.identity_ids = size;
    out.values = logits;  // nothing to leave out: the row is its own list of values
    count = size;
  } else {
    out.identity_ids = 0;
    out.compacted.resize(size);
    if (2 * extremes.num_neg_inf > std::ssize(logits)) {
      // Mostly masked (top-k, a grammar): most chunks hold no candidate, which a branch-free
      // (vectorized) count tells first, and the branch within the rest is predictable.
      constexpr size_t kChunk = 32;
      for (size_t chunk = 0; chunk < size; chunk += kChunk) {
        const size_t end = std::min(size, chunk + kChunk);
        uint32_t unmasked = 0;
        for (size_t i = chunk; i < end; ++i) unmasked += logits[i] != kMasked ? 1U : 0U;
        if (unmasked == 0) continue;
        for (size_t i = chunk; i < end; ++i) {
          if (logits[i] == kMasked) continue;
          out.ids[count] = static_cast<int32_t>(i);
          out.compacted[count] = logits[i];
          ++count;
        }
      }
    } else {
      for (size_t i = 0; i < size; ++i) {
        const float logit = logits[i];
        // Written always, kept (count advanced) only when unmasked: no branch on a coin flip.
        out.ids[count] = static_cast<int32_t>(i);
        out.compacted[count] = logit;
        count += logit != kMasked ? 1 : 0;
      }
    }
    out.ids.resize(count);
    out.values = std::span<const float>(out.compacted.data(), count);
  }
  out.min_logit = extremes.min_above_neg_inf;
  if (count == 0) return;
  if (!extremes.has_nan) {
    out.best = static_cast<int32_t>(extremes.argmax);
    out.max_logit = extremes.max;
    return;
  }
  // With NaNs, as a scan in id order takes them: the first candidate, then any larger one.
  for (size_t j = 0; j < count; ++j) {
    if (out.best < 0 || out.values[j] > out.max_logit) {
      out.best = out.ids[j];
      out.max_logit = out.values[j];
    }
  }
}

// The candidates' weights exp(logit - max_logit) by kernels::ExpShifted, within its error bound
// of std::exp's, and their sum (in the kernel's order) as the kept total.
void ApproximateWeights(Candidates& candidates) {
  candidates.weights.resize(candidates.ids.size());
  candidates.kept_total =
      kernels::ExpShifted(candidates.values.data(), std::ssize(candidates.values),
                          candidates.max_logit, candidates.weights.data());
}

// Bound on the error of a sum of `n` approximate weights (or of all, total ~ `total`), added in
// any order with up to n + kBuckets roundings (the histogram's buckets add their own), against
// the same sum of std::exp's weights in another order: each weight's error (kernels/ops.h) plus
// the roundings of the two sums.
double SumErrorBound(size_t n, double total) {
  const auto count = static_cast<double>(n);
  return (kernels::kExpShiftedRelativeError +
          2.0 * (count + kBuckets + 2.0) * std::numeric_limits<double>::epsilon()) *
             total +
         count * kernels::kExpShiftedAbsoluteError;
}

// Each candidate's bucket, 0 for the largest logit, monotone in max - logit (rounding to f32 and
// scaling are monotone; NaNs go to the last bucket), and the buckets' masses.
void FillTopPHistogram(Candidates& candidates, std::array<double, kBuckets>& mass) {
  const size_t n = candidates.ids.size();
  candidates.rank.resize(n);
  const float max_logit = candidates.max_logit;
  constexpr auto kLast = static_cast<float>(kBuckets - 1);
  const float range = max_logit - candidates.min_logit;
  const float scale = range > 0.0F ? kLast / range : 0.0F;
  const float* values = candidates.values.data();
  uint16_t* out = candidates.rank.data();
  for (size_t j = 0; j < n; ++j) {
    const float at = (max_logit - values[j]) * scale;
    out[j] = static_cast<uint16_t>(at < kLast ? at : kLast);  // at >= 0 unless NaN
  }
  mass.fill(0.0);
  const double* weights = candidates.weights.data();
  for (size_t j = 0; j < n; ++j) mass[out[j]] += weights[j];
}

// `members` (the crossing bucket's candidates) sorted as the full sort orders them, and the
// index of the last one the nucleus keeps, given the mass `above` of the higher buckets; nullopt
// where the sums' rounding `margin` leaves it in doubt (the full sort then decides).
std::optional<size_t> LastKeptMember(const Candidates& candidates, std::span<uint32_t> members,
                                     double above, double total, double p, double margin) {
  const std::span<const float> values = candidates.values;
  std::sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
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

// Top-p by its definition (TopPBySorting on the row, which it masks), then the verdict read back
// from the row.
void TopPFromSorting(std::span<float> logits, double p, Candidates& candidates) {
  TopPBySorting(logits, p);
  const size_t n = candidates.ids.size();
  candidates.rank.resize(n);
  candidates.last_kept_rank = 0;
  candidates.kept_total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const bool dropped = logits[static_cast<size_t>(candidates.ids[j])] == kMasked;
    candidates.rank[j] = dropped ? 1 : 0;
    candidates.kept_total += dropped ? 0.0 : candidates.weights[j];
  }
}

// Top-p over collected candidates and their approximate weights: sets the verdict (rank,
// last_kept_rank, kept_total) without touching the row, except on the close calls that the full
// sort decides. The nucleus keeps the largest logit, so `best` and `max_logit` stay the draw's.
void TopP(std::span<float> logits, double p, Candidates& candidates) {
  const std::vector<int32_t>& ids = candidates.ids;
  if (ids.empty()) return;
  const double total = candidates.kept_total;
  thread_local std::array<double, kBuckets> mass;
  FillTopPHistogram(candidates, mass);
  double above = 0.0;  // the mass of the buckets before `crossing`
  uint32_t crossing = 0;
  for (; crossing + 1 < kBuckets; ++crossing) {
    if ((above + mass[crossing]) / total >= p) break;
    above += mass[crossing];
  }
  // Bound on |histogram sum - sorted sum| of any prefix, relative to the total (at least 1, the
  // largest logit's weight): the weights' and both sums' errors (SumErrorBound, twice as the
  // total is divided out), the sorted path's division of each term, and the sums over buckets,
  // in units of DBL_EPSILON, with a factor of 4 to spare.
  const double margin =
      4.0 * (2.0 * SumErrorBound(ids.size(), total) / total +
             (static_cast<double>(ids.size()) + static_cast<double>(crossing) + 4.0) *
                 std::numeric_limits<double>::epsilon());
  constexpr size_t kMaxSortedBucket = 8192;
  // The crossing bucket's candidates; the buffer only grows (a resize down and up again would
  // write it all each draw).
  thread_local std::vector<uint32_t> member_buffer;
  if (member_buffer.size() < ids.size()) member_buffer.resize(ids.size());
  size_t num_members = 0;
  const uint16_t* rank = candidates.rank.data();
  const auto crossing_rank = static_cast<uint16_t>(crossing);
  constexpr size_t kChunk = 32;
  for (size_t chunk = 0; chunk < ids.size(); chunk += kChunk) {
    const size_t end = std::min(ids.size(), chunk + kChunk);
    // Few candidates share the crossing bucket: most chunks hold none, which a branch-free
    // (vectorized) test tells first.
    uint32_t hits = 0;
    for (size_t j = chunk; j < end; ++j) hits += rank[j] == crossing_rank ? 1U : 0U;
    if (hits == 0) continue;
    for (size_t j = chunk; j < end; ++j) {
      if (rank[j] == crossing_rank) member_buffer[num_members++] = static_cast<uint32_t>(j);
    }
  }
  if (num_members > kMaxSortedBucket) return TopPFromSorting(logits, p, candidates);
  const std::span<uint32_t> members(member_buffer.data(), num_members);
  const std::optional<size_t> last = LastKeptMember(candidates, members, above, total, p, margin);
  if (!last) return TopPFromSorting(logits, p, candidates);
  // Kept: the buckets before the crossing one and its members up to `last`; the members after
  // it rank with the buckets beyond.
  double kept = above;
  for (size_t m = 0; m <= *last; ++m) kept += candidates.weights[members[m]];
  for (size_t m = *last + 1; m < members.size(); ++m) {
    candidates.rank[members[m]] = static_cast<uint16_t>(crossing + 1);
  }
  candidates.last_kept_rank = static_cast<uint16_t>(crossing);
  candidates.kept_total = kept;
}

// Whether top-p kept candidate j (every one before top-p has run).
bool Kept(const Candidates& candidates, size_t j) {
  return candidates.rank.empty() || candidates.rank[j] <= candidates.last_kept_rank;
}

// Candidate j's weight if top-p kept it, else 0 (as a masked token weighs in the definition).
double KeptWeight(const Candidates& candidates, size_t j) {
  return Kept(candidates, j) ? candidates.weights[j] : 0.0;
}

// The kept weights of candidates [begin, end) summed without a branch per candidate (which
// would be a coin flip on a flat distribution): each sum adds the weight's bits or 0's.
double KeptSum(const Candidates& candidates, size_t begin, size_t end) {
  const double* weights = candidates.weights.data();
  const uint16_t* rank = candidates.rank.empty() ? nullptr : candidates.rank.data();
  const uint16_t last = candidates.last_kept_rank;
  constexpr size_t kLanes = 4;  // independent running sums
  std::array<double, kLanes> lanes{};
  size_t j = begin;
  for (; j + kLanes <= end; j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const uint64_t keep = rank == nullptr || rank[j + l] <= last ? ~uint64_t{0} : 0;
      lanes[l] += std::bit_cast<double>(std::bit_cast<uint64_t>(weights[j + l]) & keep);
    }
  }
  for (; j < end; ++j) lanes[0] += KeptWeight(candidates, j);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

// SampleFromLogits's inverse-CDF draw over the kept candidates, by its definition: weights
// std::exp(logit - max) (recomputed here), total and running sums in id order; every other
// token weighs 0 there, and adding 0 leaves each sum as it was.
int32_t DrawExactly(const Candidates& candidates, double u) {
  const size_t n = candidates.ids.size();
  thread_local std::vector<double> weights;
  weights.resize(n);
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    weights[j] = Kept(candidates, j)
                     ? std::exp(static_cast<double>(candidates.values[j] - candidates.max_logit))
                     : 0.0;
    total += weights[j];
  }
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_possible = candidates.best;
  for (size_t j = 0; j < n; ++j) {
    if (weights[j] == 0.0) continue;
    cumulative += weights[j];
    last_possible = candidates.ids[j];
    if (target < cumulative) return last_possible;
  }
  return last_possible;  // rounding left target at the very top
}

// DrawExactly's token from the approximate weights: the running sums are walked block by block
// up to the target's block (half the candidates on average), and the token taken where the
// target lies farther than the sums' error bound from both ends of its interval, so that the
// exact sums choose it too; closer calls take DrawExactly.
int32_t Draw(const Candidates& candidates, double u) {
  INFER_CHECK(candidates.best >= 0, "sampling: every token is masked");
  const size_t n = candidates.ids.size();
  const double total = candidates.kept_total;
  const double target = u * total;
  // Each side of the comparison (the target, a running sum) is off from its exact counterpart
  // by at most the sums' bound; the target also by its rounding.
  const double margin =
      2.0 * SumErrorBound(n, total) + 2.0 * std::numeric_limits<double>::epsilon() * total;
  constexpr size_t kBlock = 64;
  double before = 0.0;  // the running sum before block `begin`
  size_t begin = 0;
  for (; begin < n; begin += kBlock) {
    const double sum = KeptSum(candidates, begin, std::min(n, begin + kBlock));
    if (target < before + sum) break;
    before += sum;
  }
  for (size_t j = begin; j < std::min(n, begin + kBlock); ++j) {
    const double weight = KeptWeight(candidates, j);
    if (weight == 0.0) continue;
    const double after = before + weight;
    if (target < after) {
      if (target - before > margin && after - target > margin) return candidates.ids[j];
      break;
    }
    before = after;
  }
  return DrawExactly(candidates, u);
}

}  // namespace

void ApplyTopP(std::span<float> logits, double p) {
  if (p >= 1.0) return;
  Candidates candidates;
  CollectCandidates(logits, candidates);
  ApproximateWeights(candidates);
  TopP(logits, p, candidates);
  for (size_t j = 0; j < candidates.ids.size(); ++j) {
    if (candidates.rank[j] > candidates.last_kept_rank) {
      logits[static_cast<size_t>(candidates.ids[j])] = kMasked;
    }
  }
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
  const kernels::RowExtremes extremes = kernels::Extremes(logits.data(), std::ssize(logits));
  if (!extremes.has_nan) return static_cast<int32_t>(extremes.argmax);
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t SampleFromLogits(std::span<const float> logits, std::mt19937_64& rng) {
  Candidates candidates;
  CollectCandidates(logits, candidates);
  ApproximateWeights(candidates);
  return Draw(candidates, UniformUnit(rng));
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
    ApproximateWeights(candidates_);
    if (top_p_ < 1.0) TopP(logits, top_p_, candidates_);
    token = Draw(candidates_, UniformUnit(rng_));
  }
  return token;
}

}  // namespace infer
