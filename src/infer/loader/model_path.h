// Resolves --model: a local folder, or a Hugging Face id in the standard HF cache layout.
#pragma once

#include <string>

namespace infer {

// A folder is returned as is. "ORG/NAME" is looked up as
// $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, then
// models--ORG--NAME/snapshots/<refs/main>/. Throws infer::Error saying where it looked.
std::string ResolveModelPath(const std::string& model);

}  // namespace infer
