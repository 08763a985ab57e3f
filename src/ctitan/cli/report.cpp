// `ctitan report DUMP_FOLDER [DUMP_FOLDER ...] [--output FILE]`: one HTML page of the runs' curves.
#include <spdlog/spdlog.h>

#include <fstream>

#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"
#include "ctitan/metrics/run_report.h"

namespace ctitan::cli {

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Plot runs' metrics.jsonl side by side as one self-contained HTML page");
  auto folders = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>("report.html");
  cmd->add_option("folders", *folders, "Runs' job.dump_folder (each holds metrics.jsonl)")->required();
  cmd->add_option("--output,-o", *output, "HTML file to write")->capture_default_str();
  cmd->callback([folders, output] {
    std::vector<metrics::RunSeries> runs;
    for (const auto& folder : *folders) runs.push_back(metrics::read_run(folder));
    std::ofstream out(*output);
    out << metrics::render_report(runs);
    if (!out) throw IoError(fmt::format("report: cannot write {}", *output));
    spdlog::info("wrote {} ({} run{})", *output, runs.size(), runs.size() == 1 ? "" : "s");
  });
}

}  // namespace ctitan::cli
