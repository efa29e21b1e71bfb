// llama.cpp's logits at every position of each line of token ids (one sequence per line), from
// its CPU backend, for benchmarks/llamacpp/gguf_accuracy.py. Built by that script against the
// prebuilt libllama of node-llama-cpp (benchmarks/llamacpp/setup.sh) and the headers of the
// llama.cpp release that node-llama-cpp bundles. The KV cache is f32 and flash attention off, so
// that a float file's logits are the float64 reference's (the script checks it), and what a
// quantized file changes is the weights and llama.cpp's rounding of the activations.
//   gguf_logits BACKENDS_DIR MODEL.gguf IDS_FILE OUT.f32 THREADS
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: gguf_logits BACKENDS_DIR MODEL IDS OUT THREADS\n");
    return 2;
  }
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[2], llama_model_default_params());
  if (model == nullptr) return 1;
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params params = llama_context_default_params();
  params.type_k = GGML_TYPE_F32;
  params.type_v = GGML_TYPE_F32;
  params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  params.n_ctx = params.n_batch = params.n_ubatch = 256;
  params.n_threads = params.n_threads_batch = std::atoi(argv[5]);
  llama_context* context = llama_init_from_model(model, params);
  if (context == nullptr) return 1;
  std::ifstream in(argv[3]);
  FILE* out = std::fopen(argv[4], "wb");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::vector<llama_token> ids;
    for (llama_token id; fields >> id;) ids.push_back(id);
    if (ids.empty() || ids.size() > 256) continue;
    llama_memory_clear(llama_get_memory(context), true);
    llama_batch batch = llama_batch_init(static_cast<int32_t>(ids.size()), 0, 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.token[i] = ids[i];
      batch.pos[i] = static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = static_cast<int32_t>(ids.size());
    if (llama_decode(context, batch) != 0) return 1;
    for (size_t i = 0; i < ids.size(); ++i) {
      std::fwrite(llama_get_logits_ith(context, static_cast<int32_t>(i)), sizeof(float), vocab,
                  out);
    }
    llama_batch_free(batch);
  }
  std::fclose(out);
  llama_free(context);
  llama_model_free(model);
  return 0;
}
