// Prints the tokens Sampler::Sample draws over many rows and settings, and how many tokens
// ApplyTopP keeps, one line each: a change to the sampler that must keep every draw (a faster
// top-p, another exp) is checked by building this before and after and comparing the outputs:
//   build/benchmarks/sampler_draws > before.txt   (old build)
//   build/benchmarks/sampler_draws > after.txt    (new build); cmp before.txt after.txt
// Rows: vocabularies of 7 to 262144 tokens, normal logits (sd 1 and 8), ties, a constant row,
// a third masked, all but 1 in 97 masked; temperatures 0.3-1.5, top_p 1 to 0.05, top_k off/40.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "infer/engine/sampler.h"
#include "infer/engine/sampling_params.h"

int main() {
  using infer::SamplingParams;
  std::mt19937_64 gen(12345);
  const int vocabs[] = {7, 100, 4099, 32000, 128256, 151936, 262144};
  const double temps[] = {0.3, 0.6, 1.0, 1.5};
  const double top_ps[] = {1.0, 0.95, 0.9, 0.5, 0.05};
  const int top_ks[] = {0, 40};
  unsigned long long checksum = 0;
  long draws = 0;
  for (const int vocab : vocabs) {
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> base(static_cast<size_t>(vocab));
      std::normal_distribution<float> normal(0.0F, kind == 1 ? 8.0F : 1.0F);
      for (auto& x : base) x = normal(gen);
      if (kind == 2)
        for (auto& x : base) x = std::round(x * 2.0F) / 2.0F;  // ties
      if (kind == 3)
        for (auto& x : base) x = 0.25F;  // constant
      if (kind == 4)
        for (size_t i = 0; i < base.size(); i += 3)
          base[i] = -std::numeric_limits<float>::infinity();
      if (kind == 5)
        for (size_t i = 0; i < base.size(); ++i)
          if (i % 97 != 5) base[i] = -std::numeric_limits<float>::infinity();
      for (const double t : temps)
        for (const double p : top_ps)
          for (const int k : top_ks) {
            SamplingParams params;
            params.temperature = t;
            params.top_p = p;
            if (k) params.top_k = k;
            params.seed = 1000 + draws;
            infer::Sampler sampler(params);
            for (int i = 0; i < (vocab > 100000 ? 3 : 10); ++i) {
              std::vector<float> row = base;
              const int token = sampler.Sample(row);
              std::printf("%d\n", token);
              checksum = checksum * 1000003 + static_cast<unsigned>(token);
              ++draws;
            }
            if (p < 1.0) {
              std::vector<float> row = base;
              infer::ApplyTopP(row, p);
              long kept = 0;
              for (const float x : row) kept += x != -std::numeric_limits<float>::infinity();
              std::printf("topp %ld\n", kept);
            }
          }
    }
  }
  std::fprintf(stderr, "%ld draws, checksum %llx\n", draws, checksum);
}
