// The `infer` binary: one subcommand per job (inspect, tokenize, generate, serve, ...).
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "infer/cli/version.h"
#include "infer/core/error.h"
#include "infer/core/log.h"

namespace infer::cli {
void AddInspectCommand(CLI::App& app);
void AddTokenizerCommands(CLI::App& app);
void AddLogitsCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddGenerateCommand(CLI::App& app);
void AddChatCommand(CLI::App& app);
void AddServeCommand(CLI::App& app);
}  // namespace infer::cli

int main(int argc, char** argv) {
  infer::InitLogging();
  // Named "infer" whatever the path it was started by, so that usage lines (and the man page
  // made from --help) read as the command a user types.
  CLI::App app{"infer: LLM inference on the CPU for Llama 3.x, Qwen3 and Gemma 3 checkpoints",
               "infer"};
  // --version (and `infer version`): the build, as vLLM's and llama.cpp's binaries answer it.
  app.set_version_flag(
      "--version", [] { return infer::cli::VersionText(); },
      "Print the version, the commit built and the ISA levels, then exit");
  app.require_subcommand(1);
  app.add_subcommand("version", "Print the version, the commit built and the ISA levels")
      ->callback([] { std::puts(infer::cli::VersionText().c_str()); });
  infer::cli::AddInspectCommand(app);
  infer::cli::AddTokenizerCommands(app);
  infer::cli::AddLogitsCommand(app);
  infer::cli::AddBenchCommand(app);
  infer::cli::AddGenerateCommand(app);
  infer::cli::AddChatCommand(app);
  infer::cli::AddServeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  } catch (const infer::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
