// `ctitan`: one binary, one subcommand per job. Every failure ends here as one line on stderr
// and a non-zero exit code; nothing escapes as an abort.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <c10/util/Logging.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "ctitan/cli/commands.h"
#include "ctitan/common/build_info.h"
#include "ctitan/common/error.h"
#include "ctitan/common/message_text.h"
#include "ctitan/train/housekeeping.h"

namespace {

using ctitan::first_line;

// The deepest subcommand the parse reached, e.g. "checkpoint export", or "" at the top level.
std::string command_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* at = &app;;) {
    auto chosen = at->get_subcommands();
    if (chosen.empty()) return path;
    at = chosen.front();
    path += (path.empty() ? "" : " ") + at->get_name();
  }
}

// A command-line parse error as one line naming the flag (CLI11 says which) and the command.
// Arguments nobody claimed are named first: "ctitan --nope" is about --nope, not about the
// subcommand CLI11 reports missing.
std::string usage_error_line(const CLI::App& app, const CLI::ParseError& e) {
  std::string message = first_line(e.what());
  if (auto extras = app.remaining(); !extras.empty() && !dynamic_cast<const CLI::ExtrasError*>(&e)) {
    message = fmt::format("unexpected argument '{}' ({})", extras.front(), message);
  }
  auto command = command_path(app);
  auto help = command.empty() ? std::string("ctitan --help") : "ctitan " + command + " --help";
  return fmt::format("{}{}; see {}", command.empty() ? "" : command + ": ", message, help);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ctitan: LLM pretraining in C++ on libtorch"};
  app.require_subcommand(1);
  // Versions of ctitan and libtorch, CUDA/NCCL compiled in or not, the CPU's vector ISA.
  app.set_version_flag("--version", [] { return ctitan::build_report(); });
  ctitan::cli::add_train_command(app);
  ctitan::cli::add_tokenizer_command(app);
  ctitan::cli::add_data_command(app);
  ctitan::cli::add_run_command(app);
  // The group first: export/import register on the group it created.
  ctitan::cli::add_checkpoint_command(app);
  ctitan::cli::add_checkpoint_export_commands(app);
  ctitan::cli::add_generate_command(app);
  ctitan::cli::add_report_command(app);
  ctitan::cli::add_estimate_command(app);
  ctitan::cli::add_ps_command(app);
  spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
  // c10 and c10d log on stderr by themselves (a store connection retried, a peer that closed,
  // at times with a C++ backtrace) before the exception ctitan turns into its one line naming the
  // rank or key. Their log is off unless TORCH_CPP_LOG_LEVEL, PyTorch's own switch, asks for it
  // (INFO, WARNING, ERROR; c10 reads it only when told to, as torch's Python module does).
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) {
    FLAGS_caffe2_log_level = 3;  // c10::GLOG_FATAL
  } else {
    c10::initLogging();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with exit code 0; CLI11 prints them.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    // Every usage error exits 2, as argparse and the config errors do (not CLI11's 1xx codes).
    fmt::print(stderr, "ctitan: {}\n", usage_error_line(app, e));
    return 2;
  } catch (const ctitan::ExitStatus& e) {
    return e.code();
  } catch (const ctitan::InputError& e) {
    fmt::print(stderr, "ctitan: {}\n", first_line(e.what()));
    return e.exit_code();
  } catch (const ctitan::IoError& e) {
    fmt::print(stderr, "ctitan: {}\n", first_line(e.what()));
    return 1;
  } catch (const std::logic_error& e) {
    fmt::print(stderr, "ctitan: internal error: {}\n", first_line(e.what()));
    return 1;
  } catch (const ctitan::train::LeakError& e) {
    fmt::print(stderr, "ctitan: {}\n", e.what());
    return 3;
  } catch (const c10::Error& e) {
    fmt::print(stderr, "ctitan: internal error: {}\n", first_line(e.what_without_backtrace()));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ctitan: error: {}\n", first_line(e.what()));
    return 1;
  }
  return 0;
}
