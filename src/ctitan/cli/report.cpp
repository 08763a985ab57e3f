// `ctitan report DUMP_FOLDER [DUMP_FOLDER ...] [--output FILE]`: one HTML page of the runs' curves.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"
#include "ctitan/common/atomic_file.h"
#include "ctitan/common/output_target.h"
#include "ctitan/metrics/run_report.h"

namespace ctitan::cli {

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Plot runs' metrics.jsonl side by side as one self-contained HTML page");
  auto folders = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>("report.html");
  cmd->add_option("folders", *folders, "Runs' job.dump_folder (each holds metrics.jsonl)")->required();
  cmd->add_option("--output,-o", *output, "HTML file to write")->capture_default_str();
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_flag("--overwrite", *overwrite, "Replace an existing --output");
  cmd->callback([folders, output, overwrite] {
    std::vector<std::filesystem::path> inputs;
    for (const auto& folder : *folders) inputs.push_back(std::filesystem::path(folder) / "metrics.jsonl");
    check_output_file("report: --output", *output, *overwrite, inputs);
    std::vector<metrics::RunSeries> runs;
    for (const auto& folder : *folders) runs.push_back(metrics::read_run(folder));
    write_file_atomically(*output, metrics::render_report(runs));
    spdlog::info("wrote {} ({} run{})", *output, runs.size(), runs.size() == 1 ? "" : "s");
  });
}

}  // namespace ctitan::cli
