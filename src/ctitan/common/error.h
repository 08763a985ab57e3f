#pragma once
// Error types that the CLI turns into a one-line message and an exit code.
#include <stdexcept>
#include <string>

namespace ctitan {

// Bad user input: config, data, tokenizer, checkpoint. The message is one line and names the
// file, key or rank at fault. The CLI prints it and exits with `exit_code` (2 for config errors).
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// A config key is wrong: unknown, wrong type, or out of range. Exit code 2, as argparse does.
class ConfigError : public InputError {
 public:
  explicit ConfigError(const std::string& message) : InputError("config error: " + message, 2) {}
};

// The system failed an operation ctitan needed while it ran: a write to a full or read-only disk,
// an fsync, a rename, a log file. Not the user's input, but the message is still one line naming
// the path; the CLI prints it and exits 1.
class IoError : public std::runtime_error {
 public:
  explicit IoError(const std::string& message) : std::runtime_error(message) {}
};

// A bug in ctitan itself (an internal lookup that cannot fail on valid use) is std::logic_error:
// the CLI prints it as "internal error".

// Not an error of ctitan's own: a command has already reported its outcome (e.g. `ctitan run`'s
// summary of a failed worker) and only the exit code is left to return. main() prints nothing.
class ExitStatus : public std::runtime_error {
 public:
  explicit ExitStatus(int code) : std::runtime_error("exit " + std::to_string(code)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace ctitan
