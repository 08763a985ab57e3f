// `ctitan generate` and `ctitan checkpoint export|import` run as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ctitan/checkpoint/hf/hf_export.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/llama/model.h"
#include "ctitan/train/trainer.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

using testing::RunResult;
using testing::TempDir;
using testing::run_ctitan;

// The JSON object `generate --json` prints as its last line.
nlohmann::json json_result(const RunResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto end = r.output.find_last_not_of('\n');
  auto start = r.output.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return nlohmann::json::parse(r.output.substr(start, end + 1 - start));
}

// A failed run ends in one line "ctitan: ..." containing `needle`, exit code 1, no abort.
void expect_error_line(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto trimmed = r.output.substr(0, r.output.find_last_not_of('\n') + 1);
  auto line = trimmed.substr(trimmed.rfind('\n') == std::string::npos ? 0 : trimmed.rfind('\n') + 1);
  EXPECT_EQ(line.rfind("ctitan: ", 0), 0u) << r.output;
  EXPECT_NE(line.find(needle), std::string::npos) << "last line: " << line;
}

// The planted pattern survives the whole path. The tiny job's data cycles through
// 0..15 (the 60-step job ends at loss ~0.003), so a model that learned it continues any run of the cycle; trained in process, exported
// with the library, then sampled by the binary from the HF files alone.
TEST(CliHf, GenerateReproducesThePlantedCycleFromAnExport) {
  TempDir dir;
  auto config = testing::tiny_job_config(dir.path());
  train::Trainer trainer(config);
  trainer.train();
  checkpoint::hf::export_hf(trainer.state_dicts().at("model"), trainer.model().args(), {}, dir.path() / "hf");

  std::vector<int64_t> expected;
  for (int i = 0; i < 24; ++i) expected.push_back((7 + i) % 16);
  std::vector<std::string> gen{"generate", "--checkpoint", dir.file("hf"), "--prompt-ids", "3,4,5,6",
                               "--max-new-tokens", "24", "--temperature", "0", "--json"};
  auto out = json_result(run_ctitan(gen));
  EXPECT_EQ(out["ids"].get<std::vector<int64_t>>(), expected) << out.dump();
  EXPECT_EQ(out["text"], "");  // no tokenizer in a tokens-only job

  // Re-exported by the CLI as sharded bf16: the cycle is learned with margin enough to survive.
  auto exp = run_ctitan({"checkpoint", "export", "--input", dir.file("hf"), "--output", dir.file("bf16"),
                         "--dtype", "bfloat16", "--max-shard-size", "20KB"});
  ASSERT_EQ(exp.exit_code, 0) << exp.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "bf16" / "model.safetensors.index.json"));
  gen[2] = dir.file("bf16");
  EXPECT_EQ(json_result(run_ctitan(gen))["ids"].get<std::vector<int64_t>>(), expected);
}

// A random model with a byte-level tokenizer: --prompt text is BOS + its bytes, so it must give
// exactly what --prompt-ids of those ids gives, and the text is the decoded ids.
TEST(CliHf, TextPromptEqualsItsIdsAndDecodes) {
  TempDir dir;
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  data::Tokenizer::from_ranks(bytes).save(dir.file("tok.model"));
  models::llama::ModelArgs args;
  args.dim = 32; args.n_layers = 1; args.n_heads = 2; args.vocab_size = 258; args.max_seq_len = 64;
  torch::manual_seed(9);
  models::llama::Transformer model(args);
  models::llama::init_weights(*model);
  StateDict state;
  for (const auto& p : model->named_parameters()) state[p.key()] = p.value().detach();
  checkpoint::hf::HfExportOptions options;
  options.tokenizer_path = dir.file("tok.model");
  checkpoint::hf::export_hf(state, args, options, dir.path() / "hf");
  // The export carries the tokenizer in both formats; each encodes as the source does.
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "tokenizer.model"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() / "hf" / file)) << file;
  }
  const auto source = data::Tokenizer::load(dir.file("tok.model"));
  for (const char* file : {"hf/tokenizer.json", "hf/tokenizer.model"}) {
    auto exported = data::Tokenizer::load(dir.file(file));
    EXPECT_EQ(exported.encode("h\xc3\xa9llo, w\xe2\x82\xacrld 123", true, true),
              source.encode("h\xc3\xa9llo, w\xe2\x82\xacrld 123", true, true)) << file;
    EXPECT_EQ(exported.eos_id(), source.eos_id()) << file;
  }
  auto generation = nlohmann::json::parse(testing::read_file(dir.file("hf/generation_config.json")));
  EXPECT_EQ(generation["bos_token_id"], source.bos_id());

  std::vector<std::string> common{"generate", "--checkpoint", dir.file("hf"), "--max-new-tokens", "12",
                                  "--temperature", "0.8", "--top-k", "20", "--seed", "3", "--json"};
  auto by_text = json_result(run_ctitan(testing::concat(common, {"--prompt", "hi"})));
  auto by_ids = json_result(run_ctitan(testing::concat(common, {"--prompt-ids", "256,104,105"})));
  EXPECT_EQ(by_text, by_ids);
  auto ids = by_text["ids"].get<std::vector<int32_t>>();
  EXPECT_FALSE(ids.empty());
  std::vector<int32_t> base;
  for (auto id : ids) if (id < 256) base.push_back(id);
  auto tok = data::Tokenizer::load(dir.file("tok.model"));
  auto expected = nlohmann::json(tok.decode(base)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  EXPECT_EQ(by_text["text"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), expected);
}

TEST(CliHf, BadInputsEndInOneLine) {
  TempDir dir;
  expect_error_line(run_ctitan({"generate", "--checkpoint", dir.file("nope"), "--prompt-ids", "1"}), "does not exist");
  expect_error_line(run_ctitan({"checkpoint", "import", "--input", dir.file("nope"), "--output", dir.file("o")}),
                    "is not a directory");

  models::llama::ModelArgs args;
  args.dim = 16; args.n_layers = 1; args.n_heads = 2; args.vocab_size = 20; args.max_seq_len = 8;
  models::llama::Transformer model(args);
  StateDict state;
  for (const auto& p : model->named_parameters()) state[p.key()] = p.value().detach();
  checkpoint::hf::export_hf(state, args, {}, dir.path() / "hf");
  expect_error_line(run_ctitan({"generate", "--checkpoint", dir.file("hf"), "--prompt", "x"}), "needs a tokenizer");
  expect_error_line(run_ctitan({"generate", "--checkpoint", dir.file("hf"), "--prompt-ids", "1,x"}), "'x'");
  expect_error_line(run_ctitan({"generate", "--checkpoint", dir.file("hf"), "--prompt-ids", "1,2",
                                "--max-new-tokens", "7"}), "max_seq_len 8");
  expect_error_line(run_ctitan({"checkpoint", "export", "--input", dir.file("hf"), "--output", dir.file("o"),
                                "--max-shard-size", "lots"}), "--max-shard-size 'lots'");
  expect_error_line(run_ctitan({"checkpoint", "export", "--input", dir.file("hf"), "--output", dir.file("o"),
                                "--dtype", "int8"}), "int8");

  // A truncated weights file is named in the error.
  auto weights = (dir.path() / "hf" / "model.safetensors").string();
  auto bytes = testing::read_file(weights);
  testing::write_file(weights, bytes.substr(0, bytes.size() - 10));
  expect_error_line(run_ctitan({"generate", "--checkpoint", dir.file("hf"), "--prompt-ids", "1"}), weights);
}

}  // namespace
}  // namespace ctitan
