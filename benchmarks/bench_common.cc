#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

namespace infer::bench {

void ProgressModel::SetLabel(std::string label, int64_t total_steps) {
  label_ = std::move(label);
  total_steps_ = total_steps;
  steps_ = 0;
  tokens_ = 0;
  label_start_ = std::chrono::steady_clock::now();
}

void ProgressModel::Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) {
  inner_.Forward(steps, logits);
  for (const SequenceStep& step : steps) tokens_ += step.num_new;
  Tick();
}

void ProgressModel::Tick() {
  ++steps_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_print_ < std::chrono::seconds(1)) return;
  last_print_ = now;
  const double elapsed_s = std::chrono::duration<double>(now - label_start_).count();
  if (total_steps_ > 0) {
    std::fprintf(stderr, "\r  %s: step %lld/%lld, %.1f s   ", label_.c_str(),
                 static_cast<long long>(steps_), static_cast<long long>(total_steps_), elapsed_s);
  } else {
    std::fprintf(stderr, "\r  %s: step %lld, %.1f s   ", label_.c_str(),
                 static_cast<long long>(steps_), elapsed_s);
  }
  std::fflush(stderr);
}

void ClearProgressLine() { std::fprintf(stderr, "\r%*s\r", 160, ""); }

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto low = static_cast<size_t>(std::floor(rank));
  const size_t high = std::min(low + 1, sorted.size() - 1);
  return sorted[low] + (rank - static_cast<double>(low)) * (sorted[high] - sorted[low]);
}

std::string CommandOutput(const char* command) {
  std::string out;
  if (FILE* pipe = popen(command, "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    pclose(pipe);
  }
  const size_t begin = out.find_first_not_of(" \n");
  if (begin == std::string::npos) return "";
  return out.substr(begin, out.find_last_not_of(" \n") - begin + 1);
}

std::string CpuDescription() {
  std::string name =
      CommandOutput("lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1");
  if (name.empty()) name = CommandOutput("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2");
  if (name.empty()) name = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string flag; words >> flag;) flags.insert(flag);
    break;
  }
  std::string have, lack;
  for (const char* flag : {"avx512f", "avx512_bf16", "amx_bf16"}) {
    std::string& list = flags.count(flag) != 0 ? have : lack;
    list += (list.empty() ? "" : " ") + std::string(flag);
  }
  return name + " (" + have + (have.empty() || lack.empty() ? "" : "; ") +
         (lack.empty() ? "" : "no " + lack) + ")";
}

std::string UtcTime(const char* format) {
  char text[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof(text), format, std::gmtime(&now));
  return text;
}

int ParseAndRun(CLI::App& app, int argc, char** argv, const std::function<int()>& run) {
  try {
    app.parse(argc, argv);
    return run();
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
}

}  // namespace infer::bench
