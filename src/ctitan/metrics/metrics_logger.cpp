#include "ctitan/metrics/metrics_logger.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ctitan/common/error.h"

namespace ctitan::metrics {

void prepare_metrics_file(const std::string& path, int64_t resumed_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (resumed_step <= 0 || !fs::exists(path, ec)) {
    fs::remove(path, ec);
    return;
  }
  std::ifstream in(path);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  if (!in || !out) throw IoError(fmt::format("cannot rewrite metrics file {} for the resumed run", path));
  std::string line;
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
        row["step"].get<int64_t>() <= resumed_step) {
      out << line << '\n';
    }
  }
  out.close();
  if (!out) throw IoError(fmt::format("cannot rewrite metrics file {} for the resumed run", path));
  fs::rename(tmp, path, ec);
  if (ec) throw IoError(fmt::format("cannot replace metrics file {}: {}", path, ec.message()));
}

MetricsLogger::MetricsLogger(const std::string& jsonl_path, const std::string& tensorboard_dir) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (jsonl_path.empty()) return;
  jsonl_path_ = jsonl_path;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(jsonl_path).parent_path(), ec);
  jsonl_.open(jsonl_path, std::ios::app);
  if (!jsonl_) throw IoError(fmt::format("cannot write metrics file {}", jsonl_path));
}

namespace {

// One console line for a mixture-of-experts model, from its moe/ fields: the least balanced
// layer (largest load_cv), the widest bias range, and under EP the all-to-all's bytes and wait.
void log_moe_line(const StepMetrics& m) {
  double worst_cv = -1, worst_max = 0, bias_lo = 0, bias_hi = 0, a2a_bytes = -1, a2a_s = 0, aux = -1;
  std::string worst_layer;
  for (const auto& [name, value] : m.extra) {
    if (name.rfind("moe/", 0) != 0) continue;
    const auto slash = name.rfind('/');
    const std::string field = name.substr(slash + 1), layer = name.substr(4, slash > 4 ? slash - 4 : 0);
    if (field == "load_cv" && value > worst_cv) {
      worst_cv = value;
      worst_layer = layer;
    }
    if (field == "load_max") worst_max = std::max(worst_max, value);
    if (field == "bias_min") bias_lo = std::min(bias_lo, value);
    if (field == "bias_max") bias_hi = std::max(bias_hi, value);
    if (name == "moe/a2a_bytes_per_step") a2a_bytes = value;
    if (name == "moe/a2a_exposed_s") a2a_s = value;
    if (name == "moe/aux_loss") aux = value;
  }
  if (worst_cv < 0) return;
  spdlog::info("moe: load cv {:.3f} at most ({}), busiest expert {:.2f}x the mean, bias [{:+.4f}, {:+.4f}]{}{}",
               worst_cv, worst_layer, worst_max, bias_lo, bias_hi,
               a2a_bytes < 0 ? "" : fmt::format(", all-to-all {:.2f} MB/step, {:.4f} s exposed", a2a_bytes / 1e6, a2a_s),
               aux < 0 ? "" : fmt::format(", balance loss {:.5f}", aux));
}

}  // namespace

void MetricsLogger::log(const StepMetrics& m) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  spdlog::info("step: {:>5}  loss: {:8.4f}  grad_norm: {:7.4f}  memory: {:5.2f}GiB (peak {:5.2f}GiB)  "
               "tps: {:>8.0f}  tflops: {:6.3f}  mfu: {:5.2f}%  comm: {:4.1f}%",
               m.step, m.loss, m.grad_norm, double(m.memory_active_bytes) / kGiB,
               double(m.memory_peak_bytes) / kGiB, m.tps, m.tflops, m.mfu,
               m.time_step_s > 0 ? 100.0 * m.comm_exposed_s / m.time_step_s : 0.0);
  auto share = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.1f}%", v); };
  spdlog::info("monitor: memory {} of capacity, compute {}, exposed comm {}, bandwidth use {}, grad sync {}  "
               "(worst rank: memory {}, compute {}, bandwidth use {}, grad sync {})",
               share(m.monitoring.memory_pct), share(m.monitoring.compute_pct), share(m.monitoring.exposed_comm_pct),
               share(m.monitoring.bandwidth_use_pct), share(m.monitoring.grad_sync_pct), share(m.worst.memory_pct),
               share(m.worst.compute_pct), share(m.worst.bandwidth_use_pct), share(m.worst.grad_sync_pct));
  log_moe_line(m);
  if (tensorboard_) {
    const double step_s = m.time_step_s > 0 ? m.time_step_s : 1.0;
    if (m.device_memory) {  // torchtitan's device memory monitor's names
      tensorboard_->add_scalar("memory/max_reserved(GiB)", double(m.memory_peak_reserved_bytes) / kGiB, m.step);
      tensorboard_->add_scalar("memory/num_alloc_retries", double(m.memory_alloc_retries), m.step);
      tensorboard_->add_scalar("memory/num_ooms", double(m.memory_ooms), m.step);
    }
    for (const auto& [tag, value] : std::initializer_list<std::pair<const char*, double>>{
             {"loss_metrics/global_avg_loss", m.loss},
             {"loss_metrics/global_max_loss", m.max_loss},
             {"grad_norm", m.grad_norm},
             {"lr", m.lr},
             {"throughput(tps)", m.tps},
             {"tflops", m.tflops},
             {"mfu(%)", m.mfu},
             {"time_metrics/end_to_end(s)", m.time_step_s},
             {"time_metrics/data_loading(s)", m.time_data_s},
             {"time_metrics/data_loading(%)", 100.0 * m.time_data_s / step_s},
             {"time_metrics/slowest_rank(s)", m.time_step_max_s},
             {"memory/max_active(GiB)", double(m.memory_peak_bytes) / kGiB},
             {"memory/active(GiB)", double(m.memory_active_bytes) / kGiB},
             {"memory/rss(GiB)", double(m.memory_rss_bytes) / kGiB},
             {"comm/exposed(s)", m.comm_exposed_s},
             {"comm/exposed(%)", 100.0 * m.comm_exposed_s / step_s},
             {"comm/bytes_per_step", m.comm_bytes_per_step},
             {"comm/bandwidth(GB/s)", m.comm_bandwidth_gbps},
             {"pipeline/bubble", m.pp_bubble},
             {"pipeline/bubble_max", m.pp_bubble_max},
             {"monitoring/memory(%)", m.monitoring.memory_pct},
             {"monitoring/compute(%)", m.monitoring.compute_pct},
             {"monitoring/bandwidth_use(%)", m.monitoring.bandwidth_use_pct},
             {"monitoring/grad_sync(%)", m.monitoring.grad_sync_pct},
             {"monitoring/worst_rank/memory(%)", m.worst.memory_pct},
             {"monitoring/worst_rank/compute(%)", m.worst.compute_pct},
             {"monitoring/worst_rank/bandwidth_use(%)", m.worst.bandwidth_use_pct},
             {"monitoring/worst_rank/grad_sync(%)", m.worst.grad_sync_pct},
         }) {
      if (std::isnan(value)) continue;  // not measured in this run (e.g. bandwidth of one process)
      tensorboard_->add_scalar(tag, value, m.step);
    }
    for (const auto& [tag, value] : m.extra) {  // data_tokens/<source>, moe/layer_<i>/load_cv, ...
      if (!std::isnan(value)) tensorboard_->add_scalar(tag, value, m.step);
    }
  }
  if (!jsonl_.is_open()) return;
  nlohmann::json row = {
      {"step", m.step},
      {"loss", m.loss},
      {"max_loss", m.max_loss},
      {"grad_norm", m.grad_norm},
      {"lr", m.lr},
      {"tps", m.tps},
      {"tflops", m.tflops},
      {"mfu", m.mfu},
      {"memory_active_bytes", m.memory_active_bytes},
      {"memory_peak_bytes", m.memory_peak_bytes},
      {"memory_peak_fsdp_params_bytes", m.memory_peak_fsdp_params_bytes},
      {"memory_peak_fsdp_grads_bytes", m.memory_peak_fsdp_grads_bytes},
      {"memory_peak_fsdp_comm_bytes", m.memory_peak_fsdp_comm_bytes},
      {"memory_rss_bytes", m.memory_rss_bytes},
      {"memory_alloc_count", m.memory_alloc_count},
      {"memory_page_faults_per_step", m.memory_page_faults_per_step},
      {"time_step_s", m.time_step_s},
      {"time_data_s", m.time_data_s},
      {"time_step_max_s", m.time_step_max_s},
      {"comm_exposed_s", m.comm_exposed_s},
      {"comm_bytes_per_step", m.comm_bytes_per_step},
      {"memory_params_bytes", m.memory_params_bytes},
      {"memory_grads_bytes", m.memory_grads_bytes},
      {"memory_optimizer_bytes", m.memory_optimizer_bytes},
      {"comm_exposed_ratio", m.time_step_s > 0 ? m.comm_exposed_s / m.time_step_s : 0.0},
  };
  if (m.device_memory) {
    row["memory_reserved_bytes"] = m.memory_reserved_bytes;
    row["memory_peak_reserved_bytes"] = m.memory_peak_reserved_bytes;
    row["memory_alloc_retries"] = m.memory_alloc_retries;
    row["memory_ooms"] = m.memory_ooms;
  }
  // Monitoring shares; null where not measured.
  auto pct = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  for (const auto& [prefix, mon] : {std::pair<std::string, const Monitoring*>{"", &m.monitoring}, {"worst_", &m.worst}}) {
    row[prefix + "memory_capacity_pct"] = pct(mon->memory_pct);
    row[prefix + "compute_pct"] = pct(mon->compute_pct);
    row[prefix + "comm_exposed_pct"] = pct(mon->exposed_comm_pct);
    row[prefix + "comm_bandwidth_use_pct"] = pct(mon->bandwidth_use_pct);
    row[prefix + "grad_sync_pct"] = pct(mon->grad_sync_pct);
  }
  row["comm_bandwidth_gbps"] = pct(m.comm_bandwidth_gbps);
  if (!std::isnan(m.pp_bubble)) {
    row["pp_bubble"] = pct(m.pp_bubble);
    row["pp_bubble_max"] = pct(m.pp_bubble_max);
    row["pp_bubble_theory"] = pct(m.pp_bubble_theory);
    row["pp_memory_peak_bytes"] = m.pp_memory_peak_bytes;
    row["pp_model_state_bytes"] = m.pp_model_state_bytes;
  }
  for (const auto& [name, value] : m.extra) row[name] = pct(value);
  jsonl_ << row.dump() << '\n';
  check_jsonl();
}

void MetricsLogger::check_jsonl() {
  // A full disk fails the stream's buffered write or its flush, not the open: without this check
  // a run "succeeds" with an empty metrics.jsonl. errno still holds the failed write(2)'s reason.
  if (jsonl_.is_open() && !jsonl_) {
    throw IoError(fmt::format("writing metrics file {} failed: {}", jsonl_path_, std::strerror(errno)));
  }
}

void MetricsLogger::log_validation(int64_t step, double loss, int64_t tokens) {
  spdlog::info("validate step: {:>5}  loss: {:8.4f}  tokens: {}", step, loss, tokens);
  if (tensorboard_) tensorboard_->add_scalar("validation_metrics/loss", loss, step);
  if (jsonl_.is_open()) {
    jsonl_ << nlohmann::json{{"step", step}, {"validation_loss", loss}, {"validation_tokens", tokens}}.dump()
           << '\n';
  }
}

void MetricsLogger::log_summary(int64_t first_step, int64_t last_step, const std::vector<TargetCheck>& checks) {
  spdlog::info("monitoring, steps {}..{}, worst rank, step-weighted:\n{}", first_step, last_step,
               monitoring_table(checks));
  if (jsonl_path_.empty()) return;
  nlohmann::json summary = {{"first_step", first_step}, {"last_step", last_step}};
  for (const auto& c : checks) {
    summary[c.name] = {{"value_pct", std::isnan(c.value) ? nlohmann::json(nullptr) : nlohmann::json(c.value)},
                       {"target", c.target},
                       {"met", c.met ? nlohmann::json(*c.met) : nlohmann::json(nullptr)}};
  }
  // Beside metrics.jsonl, whose rows stay one per logged step for every reader.
  const auto path = std::filesystem::path(jsonl_path_).parent_path() / "monitoring_summary.json";
  std::ofstream out(path);
  out << summary.dump(2) << '\n';
  if (!out) throw IoError(fmt::format("cannot write {}", path.string()));
}

void MetricsLogger::sync() {
  flush();
  for (const std::string& path : {jsonl_path_, tensorboard_ ? tensorboard_->path() : std::string()}) {
    if (path.empty()) continue;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      throw IoError(fmt::format("cannot sync metrics file {}: {}", path, std::strerror(err)));
    }
    ::close(fd);
  }
}

void MetricsLogger::flush() {
  if (jsonl_.is_open()) jsonl_.flush();
  check_jsonl();
  if (tensorboard_) tensorboard_->flush();
  spdlog::default_logger()->flush();
}

}  // namespace ctitan::metrics
