// Model weights: the tensor list derived from ModelConfig (one list drives safetensors
// loading, dummy weights, "missing tensor" errors and `infer inspect`), and where the bytes
// live. Weight matrices are repacked at load into the layout the MatMul kernels read
// (kernels::PackedMatrix, in 2 MiB pages); norm and bias vectors stay as loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infer/core/tensor.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/experts.h"
#include "infer/kernels/ops.h"
#include "infer/loader/generation_config.h"
#include "infer/loader/model_config.h"

namespace infer {

// Optional tensors are left undefined (Tensor::defined() is false) when the config has no
// use for them.
struct LayerWeights {
  Tensor attn_norm;  // before attention (input_layernorm)
  kernels::PackedMatrix q_proj, k_proj, v_proj, o_proj;
  Tensor q_bias, k_bias, v_bias, o_bias;                // attention_bias
  Tensor q_norm, k_norm;                                // qk_norm
  Tensor attn_post_norm;                                // sandwich_norms: after attention
  Tensor mlp_norm;                                      // before the MLP
  Tensor mlp_post_norm;                                 // sandwich_norms: after the MLP
  kernels::PackedMatrix gate_proj, up_proj, down_proj;  // a dense MLP
  Tensor gate_bias, up_bias, down_bias;                 // mlp_bias
  // A sparse MLP (LayerConfig::sparse_mlp): the router [num_experts, hidden], kept in float
  // (never quantized), and the experts.
  kernels::PackedMatrix router;
  std::vector<kernels::Expert> experts;
  // MoeConfig::shared_expert_intermediate_size: the shared expert and its gate [1, hidden].
  kernels::Expert shared_expert;
  kernels::PackedMatrix shared_expert_gate;
  // A linear-attention layer (LayerConfig::linear_attention) instead of q/k/v/o: in_proj_qkv
  // [conv_dim, hidden], in_proj_z [value_dim, hidden], in_proj_b and in_proj_a [value_heads,
  // hidden], out_proj [hidden, value_dim]; the conv1d [conv_dim, 1, conv_kernel], A_log and
  // dt_bias [value_heads], and the gated norm's weight [value_head_dim].
  kernels::PackedMatrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
  Tensor conv1d, a_log, dt_bias, linear_norm;
};

struct ModelWeights {
  kernels::PackedMatrix embed_tokens;
  Tensor final_norm;
  kernels::PackedMatrix lm_head;  // the same storage as embed_tokens when tie_word_embeddings
  std::vector<LayerWeights> layers;
};

// One tensor the config calls for: its Hugging Face name, expected shape and slot (`matrix`
// for the 2-D weights, which are packed; `tensor` for the rest).
struct WeightSlot {
  std::string hf_name;
  Shape shape;
  Tensor* tensor = nullptr;
  kernels::PackedMatrix* matrix = nullptr;
  // The expert a matrix belongs to (-1: none). With a non-empty stack_shape the matrix is a
  // slice of a tensor that stacks every expert ([experts, rows, cols], as Qwen3.5-MoE's fused
  // `mlp.experts.gate_up_proj` and `down_proj` are stored): expert `expert`'s rows [row_begin,
  // row_begin + shape[0]).
  int64_t expert = -1;
  Shape stack_shape;
  int64_t row_begin = 0;
};
// Every tensor of the model, in checkpoint order. lm_head is listed only when untied. A sparse
// layer lists its router (`mlp.gate.weight`) and each expert's matrices
// (`mlp.experts.E.{gate,up,down}_proj.weight`) instead of the dense MLP's.
std::vector<WeightSlot> WeightSlots(const ModelConfig& config, ModelWeights& weights);
// Parameters, counting tied embeddings once.
int64_t ParameterCount(const ModelConfig& config);
// Parameters a token uses, as model cards count them ("30.5B, 3.3B active"): ParameterCount
// less the experts it does not choose (each sparse layer counts experts_per_token of its
// experts); the embedding table included. ParameterCount for a dense model.
int64_t ActiveParameterCount(const ModelConfig& config);

// Where the norm and bias vectors (and an untied embedding table) live. kHugePageCopy (the
// default): one copy into 2 MiB-page-backed memory at load, after which the checkpoint's files
// are no longer read: emptying or replacing them while serving changes nothing. kMmap: zero-copy
// views into the mmap'd safetensors, which saves the copy of an untied embedding table but, as
// with llama.cpp's mmap, a file truncated in place then faults the process (SIGBUS) on access.
// Matrices are always packed into 2 MiB pages (fewer TLB misses when streaming weights in decode).
enum class WeightPlacement { kMmap, kHugePageCopy };

struct LoadOptions {
  bool dummy = false;  // random weights from config.json alone (--load-format dummy)
  uint64_t dummy_seed = 0;
  WeightPlacement placement = WeightPlacement::kHugePageCopy;
  ThreadPool* pool = nullptr;  // used for copies and dummy init; null = single thread
  // Weight matrices (and a tied embedding, which is the output head) quantized at load; an
  // untied embedding table stays as loaded (it is only gathered from).
  kernels::Quantization quantization = kernels::Quantization::kNone;
  // The output head (the tied embedding table, or lm_head) whenever `quantization` is not none:
  // kDefault takes int8 (--lm-head-quantization auto; int4 and int4k keep a wider head, as
  // llama.cpp's 4-bit files keep Q6_K); kUnquantized keeps it in the checkpoint's dtype (none,
  // as llama-quantize's --output-tensor-type keeps it wide); kInt8 and kInt6 take that type.
  enum class Head { kDefault, kUnquantized, kInt8, kInt6 };
  Head head = Head::kDefault;
};

// A model folder loaded: the config, generation defaults and weights.
struct LoadedModel {
  std::string path;
  ModelConfig config;
  GenerationConfig generation;
  ModelWeights weights;
  DType weight_dtype = DType::kBF16;  // dtype of the checkpoint's projection weights
  kernels::Quantization quantization = kernels::Quantization::kNone;
  kernels::Quantization head_quantization = kernels::Quantization::kNone;  // the output head's
  int64_t weight_bytes = 0;         // as stored in memory (quantized matrices at their packed size)
  int64_t matrix_weights = 0;       // elements of the packed weight matrices
  int64_t matrix_weight_bytes = 0;  // their bytes in memory
  // The weight bytes one token's decode reads: every tensor but an untied embedding table
  // (gathered one row at a time), each sparse layer's experts counted as experts_per_token
  // experts of the layer's mean expert size.
  int64_t weight_bytes_per_token = 0;
  double load_time_s = 0.0;
  std::vector<std::string> warnings;  // unexpected tensors and the like, already logged
  // A GGUF file's tensor groups (llama.cpp's names without "blk.N."), in file order: the ggml
  // types they hold and their bits per weight in the file. Empty for safetensors.
  struct TensorGroup {
    std::string name;
    std::string types;
    double bits_per_weight = 0.0;
  };
  std::vector<TensorGroup> file_tensor_groups;
};

// `model` is a folder or a Hugging Face id (see model_path.h). Throws infer::Error that
// names the file and tensor at fault.
LoadedModel LoadModel(const std::string& model, const LoadOptions& options);

}  // namespace infer
