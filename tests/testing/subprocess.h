// Runs a command (the infer binary, usually) and captures its exit status, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace infer::testing {

struct CommandResult {
  int exit_code = -1;  // 128 + signal number when killed by a signal
  std::string out;
  std::string err;
};

// argv[0] is the program path. `stdin_text` is written to its standard input.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& stdin_text = "");

}  // namespace infer::testing
