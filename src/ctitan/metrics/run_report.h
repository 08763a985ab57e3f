#pragma once
// `ctitan report`: one self-contained HTML page (inline SVG, no script, no network) with the
// curves of one or more runs' metrics.jsonl side by side: how a user compares two parallel
// layouts, or a run with its resumption.
#include <string>
#include <vector>

namespace ctitan::metrics {

struct RunSeries {
  std::string name;  // the run's folder name, the legend label
  // Per metric key ("loss", "validation_loss", "tps", ...): (step, value) in step order.
  std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>> series;
};

// Reads DUMP_FOLDER/metrics.jsonl. Throws InputError naming the file when it is missing or holds
// no step rows.
RunSeries read_run(const std::string& dump_folder);

// The page: one chart per metric that any run has, one polyline per run. Each polyline carries
// data-run, data-metric and data-points attributes, so tools (and tests) can read what is drawn.
std::string render_report(const std::vector<RunSeries>& runs);

}  // namespace ctitan::metrics
