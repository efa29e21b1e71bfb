// A model from a GGUF file alone: the ModelConfig from its `<arch>.*` metadata (the llama, qwen3,
// qwen3moe and gemma3 architectures as llama.cpp's converter writes them), the generation defaults
// from its tokenizer.ggml.* ids, llama.cpp's tensor names, and the weight matrices with the
// converter's transformations undone.
#pragma once

#include <string>

#include "infer/core/thread_pool.h"
#include "infer/kernels/ops.h"
#include "infer/loader/generation_config.h"
#include "infer/loader/gguf.h"
#include "infer/loader/model_config.h"

namespace infer {

// Throws infer::Error naming the file and key for an architecture infer does not run, a
// missing hyperparameter or a value out of range.
ModelConfig GgufModelConfig(const GgufFile& file);
GenerationConfig GgufGenerationConfig(const GgufFile& file);

// llama.cpp's name for a Hugging Face weight name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); Gemma's sandwich norms take their own names.
std::string GgufTensorName(const std::string& hf_name, const ModelConfig& config);

// A weight matrix [rows, cols] (the Hugging Face shape) from its GGUF tensor, in HF's row order
// (llama's q and k rows were permuted by the converter for llama.cpp's rope: the permutation is
// undone). Q8_0 and Q5_0, Q4_0 and Q4_1, Q5_1, Q4_K, Q5_K and Q6_K are kept exactly in infer's
// int8, int4, int5, int4k, int5k and int6k; F32, F16 and BF16 are packed as loaded, or quantized as
// `quantization` asks (kNone: as loaded). Throws infer::Error naming the tensor for another
// type, or for `quantization` asked of a tensor the file already quantized. `expert` >= 0 takes
// that expert's matrix from a stack of them ([experts, rows, cols], llama.cpp's *_exps).
kernels::PackedMatrix GgufMatrix(const GgufFile& file, const GgufTensorInfo& tensor,
                                 const std::string& hf_name, const ModelConfig& config,
                                 kernels::Quantization quantization, ThreadPool* pool,
                                 TensorArena* arena, int64_t expert = -1);

}  // namespace infer
