// Resolves --model: a local folder, or a Hugging Face id in the standard HF cache layout.
#pragma once

#include <string>

namespace infer {

// A folder is returned as is, and so is a GGUF file (FILE.gguf, or any file starting with
// GGUF's magic). "ORG/NAME" is looked up as $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub, then models--ORG--NAME/snapshots/<refs/main>/; "ORG/NAME:QUANT" is
// the GGUF file of that snapshot named for QUANT (e.g. Q4_K_M, as llama.cpp's -hf picks it).
// "ollama:NAME[:TAG]" is the GGUF blob of an Ollama model (its manifest under $OLLAMA_MODELS,
// else ~/.ollama/models). Throws infer::Error saying where it looked.
std::string ResolveModelPath(const std::string& model);

// The GGUF file a resolved model path names: the path itself when it is one, or a folder's
// only *.gguf file when the folder has no config.json; "" for a safetensors checkpoint. Throws
// infer::Error for a folder with several GGUF files and no config.json (naming them).
std::string GgufModelFile(const std::string& resolved);
// The folder of a resolved model path (a GGUF file's folder), where tokenizer.json,
// tokenizer_config.json and generation_config.json are looked for.
std::string ModelFolder(const std::string& resolved);

}  // namespace infer
