#include "support/tiny_job.h"

#include <filesystem>

#include "ctitan/config/config_manager.h"
#include "ctitan/data/token_file.h"

namespace ctitan::testing {

void write_cyclic_token_file(const std::string& path, int n_tokens, int period, int vocab_size) {
  data::TokenFileWriter writer(path, uint32_t(vocab_size));
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int i = 0; i < n_tokens; ++i) tokens[size_t(i)] = i % period;
  writer.append(tokens);
  writer.finish();
}

std::vector<std::string> tiny_job_args(const std::string& dump_folder) {
  std::filesystem::create_directories(dump_folder);
  std::string data = dump_folder + "/cyclic.bin";
  if (!std::filesystem::exists(data)) write_cyclic_token_file(data, 20000, 16, 32);
  return {"--job.dump_folder", dump_folder,  "--model.dim", "64", "--model.n_layers", "2",
          "--model.n_heads", "4",  "--model.vocab_size", "32", "--training.seq_len", "32",
          "--training.local_batch_size", "4", "--training.steps", "60",
          "--training.dataset_path", data, "--training.mixed_precision_param", "float32",
          "--optimizer.lr", "3e-3", "--lr_scheduler.warmup_steps", "5", "--metrics.log_freq", "10",
          "--metrics.peak_flops", "1e12", "--comm.link_gbytes_per_s", "1", "--debug.seed", "7"};
}

config::JobConfig tiny_job_config(const std::string& dump_folder) {
  return config::load_job_config("", tiny_job_args(dump_folder));
}

}  // namespace ctitan::testing
