#include "ctitan/metrics/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"

namespace ctitan::metrics {
namespace {

// What the page plots, in this order, with the jsonl key and a title.
const std::vector<std::pair<std::string, std::string>> kCharts = {
    {"loss", "training loss"},
    {"validation_loss", "validation loss"},
    {"grad_norm", "gradient norm (before clipping)"},
    {"lr", "learning rate"},
    {"tps", "tokens/s (this rank)"},
    {"mfu", "MFU (%)"},
    {"memory_peak_gib", "peak live memory (GiB)"},
    {"compute_pct", "compute share of the step (%)"},
    {"comm_exposed_pct", "exposed communication share of the step (%)"},
};

const std::vector<std::string> kColors = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string chart(const std::string& key, const std::string& title, const std::vector<RunSeries>& runs) {
  constexpr double W = 560, H = 260, left = 70, right = 15, top = 30, bottom = 35;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& run : runs) {
    for (const auto& [k, points] : run.series) {
      if (k != key) continue;
      for (auto [x, y] : points) {
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
    }
  }
  if (!(x0 <= x1)) return "";  // no run has this metric
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::abs(y0) * 0.1);
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (W - left - right); };
  auto py = [&](double y) { return H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" data-metric=\"{}\">\n"
      "<title>{}</title>\n<text x=\"{}\" y=\"18\" font-size=\"14\">{}</text>\n"
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n",
      W, H, key, escape(title), left, escape(title), left, top, W - left - right, H - top - bottom);
  // Axis labels: the ranges, at the corners.
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.4g}</text>\n", left - 4, top + 10, y1);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.4g}</text>\n", left - 4, H - bottom, y0);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">step {:.0f}</text>\n", left, H - bottom + 16, x0);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.0f}</text>\n", W - right,
                     H - bottom + 16, x1);
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const auto& [k, points] : runs[r].series) {
      if (k != key || points.empty()) continue;
      std::string coords;
      for (auto [x, y] : points) coords += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
      svg += fmt::format(
          "<polyline data-run=\"{}\" data-metric=\"{}\" data-points=\"{}\" fill=\"none\" stroke=\"{}\" "
          "stroke-width=\"1.5\" points=\"{}\"/>\n",
          escape(runs[r].name), key, points.size(), kColors[r % kColors.size()], coords);
    }
  }
  return svg + "</svg>\n";
}

}  // namespace

RunSeries read_run(const std::string& dump_folder) {
  const auto path = std::filesystem::path(dump_folder) / "metrics.jsonl";
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("report: cannot read {}", path.string()));
  std::map<std::string, std::map<double, double>> by_key;  // a resumed run logs a step again: the last row wins
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError(fmt::format("report: {}:{} is not a JSON row", path.string(), n));
    }
    if (!row.contains("step")) continue;  // the summary row
    const double step = row["step"].get<double>();
    for (const auto& [key, title] : kCharts) {
      if (key == "memory_peak_gib" && row.contains("memory_peak_bytes")) {
        by_key[key][step] = row["memory_peak_bytes"].get<double>() / double(1 << 30);
      } else if (row.contains(key) && row[key].is_number()) {
        by_key[key][step] = row[key].get<double>();
      }
    }
  }
  if (by_key.empty()) throw InputError(fmt::format("report: {} holds no step rows", path.string()));
  RunSeries run{std::filesystem::path(dump_folder).filename().string(), {}};
  if (run.name.empty()) run.name = std::filesystem::path(dump_folder).parent_path().filename().string();
  for (const auto& [key, title] : kCharts) {
    auto it = by_key.find(key);
    if (it == by_key.end()) continue;
    run.series.emplace_back(key, std::vector<std::pair<double, double>>(it->second.begin(), it->second.end()));
  }
  return run;
}

std::string render_report(const std::vector<RunSeries>& runs) {
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ctitan report</title>\n"
      "<style>body{font-family:sans-serif;margin:20px} svg{margin:6px;background:#fff}</style></head><body>\n"
      "<h1>ctitan report</h1>\n<p>";
  for (size_t r = 0; r < runs.size(); ++r) {
    html += fmt::format("<span style=\"color:{}\">&#9632; {}</span> ", kColors[r % kColors.size()], escape(runs[r].name));
  }
  html += "</p>\n";
  for (const auto& [key, title] : kCharts) html += chart(key, title, runs);
  return html + "</body></html>\n";
}

}  // namespace ctitan::metrics
