// The transformer decoder (model/decoder.h) behind the LanguageModel interface, with the
// paged KV cache (a pool of blocks the engine assigns) or the uncached recompute path.
#pragma once

#include <memory>

#include "infer/core/thread_pool.h"
#include "infer/engine/language_model.h"
#include "infer/kernels/ops.h"
#include "infer/loader/weights.h"

namespace infer {

// `model` and `pool` must outlive the returned object. `precision`, `activations`: see Decoder.
std::unique_ptr<LanguageModel> MakeDecoderModel(
    const LoadedModel& model, ThreadPool& pool,
    kernels::MatMulPrecision precision = kernels::MatMulPrecision::kF32,
    kernels::QuantizedActivations activations = kernels::QuantizedActivations::kInt8);

}  // namespace infer
