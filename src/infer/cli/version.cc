#include "infer/cli/version.h"

#include <fmt/format.h>

#include "infer/kernels/cpu/isa.h"

namespace infer::cli {

std::string VersionText() {
  using kernels::Isa;
  std::string compiled;
  for (const Isa isa :
       {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAvx512Amx}) {
    compiled += fmt::format("{}{}", compiled.empty() ? "" : " ", kernels::IsaName(isa));
  }
  return fmt::format("infer {} (commit {})\nISA levels compiled in: {}; detected: {} (active: {})",
                     Version(), Commit(), compiled, kernels::IsaName(kernels::DetectIsa()),
                     kernels::IsaName(kernels::ActiveIsa()));
}

}  // namespace infer::cli
