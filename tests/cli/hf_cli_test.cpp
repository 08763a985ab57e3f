// `ctitan generate` and `ctitan checkpoint export|import` run as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "ctitan/checkpoint/hf/hf_export.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/transformer.h"
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
  models::ModelArgs args;
  args.dim = 32; args.n_layers = 1; args.n_heads = 2; args.vocab_size = 258; args.max_seq_len = 64;
  torch::manual_seed(9);
  models::Transformer model(args);
  models::init_weights(*model);
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

  models::ModelArgs args;
  args.dim = 16; args.n_layers = 1; args.n_heads = 2; args.vocab_size = 20; args.max_seq_len = 8;
  models::Transformer model(args);
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

// Every file under `dir` with its bytes: "untouched" means this is equal before and after.
std::map<std::string, std::string> hf_snapshot(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    auto name = std::filesystem::relative(e.path(), dir).string();
    files[name] = e.is_regular_file() ? testing::read_file(e.path().string()) : "<dir>";
  }
  return files;
}

// Names in `dir` that contain `part` (leftover staging directories).
std::vector<std::string> names_containing(const std::filesystem::path& dir, const std::string& part) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().find(part) != std::string::npos) names.push_back(e.path().filename().string());
  }
  return names;
}

// Issue #17: `checkpoint import --output .../step-2` replaced a training run's full checkpoint
// (optimizer, dataloader, RNG) by a model-only one and exited 0. Import and export now refuse
// any existing non-empty directory with one line naming it, leaving it byte for byte as it was;
// --overwrite replaces it, and only once the new directory is complete.
TEST(CliHf, ImportAndExportRefuseANonEmptyOutputUnlessOverwrite) {
  TempDir dir;
  auto trained = run_ctitan(testing::concat(testing::concat({"train"}, testing::tiny_job_args(dir.path())),
      {"--training.steps", "2", "--checkpoint.enable", "true", "--checkpoint.interval", "2",
       "--checkpoint.last_save_model_only", "false"}));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto step = dir.path() / "checkpoint" / "step-2";
  ASSERT_TRUE(std::filesystem::exists(step / "metadata.json")) << trained.output;
  auto exported = run_ctitan({"checkpoint", "export", "--input", step.string(), "--output", dir.file("hf")});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  std::filesystem::create_directories(dir.path() / "notes");
  testing::write_file(dir.file("notes/readme.txt"), "mine");
  testing::write_file(dir.file("a_file"), "mine too");
  const auto step_before = hf_snapshot(step), hf_before = hf_snapshot(dir.path() / "hf");

  // The whole output is the one error line: nothing was read or written before the refusal.
  auto expect_refused = [&](const std::vector<std::string>& args, const std::string& needle) {
    auto r = run_ctitan(args);
    expect_error_line(r, needle);
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  };
  const std::string import_hf[] = {"checkpoint", "import", "--input", dir.file("hf"), "--output"};
  const std::string export_step[] = {"checkpoint", "export", "--input", step.string(), "--output"};
  auto with = [](const auto& head, std::vector<std::string> tail) {
    return testing::concat(std::vector<std::string>(std::begin(head), std::end(head)), tail);
  };
  expect_refused(with(import_hf, {step.string()}),
                 "checkpoint import: --output " + step.string() +
                     " already exists and is not empty (a checkpoint step directory); pass --overwrite to replace it");
  expect_refused(with(import_hf, {dir.file("notes")}), "--output " + dir.file("notes") + " already exists and is not empty;");
  expect_refused(with(import_hf, {dir.file("hf")}), dir.file("hf") + " already exists and is not empty (an HF export)");
  expect_refused(with(import_hf, {dir.file("a_file"), "--overwrite"}), dir.file("a_file") + " already exists and is not a directory");
  expect_refused(with(export_step, {step.string()}), "checkpoint export: --output " + step.string() + " already exists");
  expect_refused(with(export_step, {dir.file("notes")}), dir.file("notes") + " already exists and is not empty");
  expect_refused(with(export_step, {dir.file("a_file"), "--overwrite"}), "is not a directory");
  EXPECT_EQ(hf_snapshot(step), step_before);
  EXPECT_EQ(hf_snapshot(dir.path() / "hf"), hf_before);
  EXPECT_EQ(testing::read_file(dir.file("notes/readme.txt")), "mine");
  EXPECT_EQ(testing::read_file(dir.file("a_file")), "mine too");

  // An empty directory is no one's data: both write into it without --overwrite.
  std::filesystem::create_directories(dir.path() / "empty_step");
  auto into_empty = run_ctitan(with(import_hf, {dir.file("empty_step")}));
  EXPECT_EQ(into_empty.exit_code, 0) << into_empty.output;
  // A directory that happens to be called <output>.partial is the user's, not a staging area.
  std::filesystem::create_directories(dir.path() / "hf2.partial");
  testing::write_file(dir.file("hf2.partial/keep.txt"), "kept");
  auto beside_partial = run_ctitan(with(export_step, {dir.file("hf2")}));
  EXPECT_EQ(beside_partial.exit_code, 0) << beside_partial.output;
  EXPECT_EQ(testing::read_file(dir.file("hf2.partial/keep.txt")), "kept");

  // --overwrite replaces: step-2 becomes the import's model-only checkpoint, still step 2.
  auto replaced = run_ctitan(with(import_hf, {step.string(), "--overwrite"}));
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  auto metadata = checkpoint::read_metadata(step);
  EXPECT_TRUE(metadata.model_only);
  EXPECT_EQ(metadata.step, 2);
  auto notes = run_ctitan(with(export_step, {dir.file("notes"), "--overwrite"}));
  ASSERT_EQ(notes.exit_code, 0) << notes.output;
  EXPECT_TRUE(checkpoint::hf::is_hf_dir(dir.path() / "notes"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "notes" / "readme.txt"));
  EXPECT_EQ(names_containing(dir.path() / "checkpoint", ".partial-"), std::vector<std::string>{});
  EXPECT_EQ(names_containing(dir.path(), ".partial-"), std::vector<std::string>{});
}

// Issue #17, through the binary: a config.json with rms_norm_eps -1 generated zeros and exited 0;
// a tensor shape [2^62, 2^62] ended in "internal error: Storage size calculation overflowed"
// naming no file. Both are one line naming the file and the key or tensor.
TEST(CliHf, BadHfConfigValuesAndTensorShapesAreOneLineNamingTheFile) {
  TempDir dir;
  models::ModelArgs args;
  args.dim = 16; args.n_layers = 1; args.n_heads = 2; args.vocab_size = 20; args.max_seq_len = 8;
  models::Transformer model(args);
  StateDict state;
  for (const auto& p : model->named_parameters()) state[p.key()] = p.value().detach();
  checkpoint::hf::export_hf(state, args, {}, dir.path() / "hf");
  const auto config_path = dir.file("hf/config.json");
  const auto config = nlohmann::json::parse(testing::read_file(config_path));
  const std::vector<std::string> generate = {"generate", "--checkpoint", dir.file("hf"), "--prompt-ids", "1",
                                             "--max-new-tokens", "2"};
  for (auto [key, value] : {std::pair<std::string, nlohmann::json>{"rms_norm_eps", -1}, {"rms_norm_eps", 0},
                            {"rope_theta", -1.5}, {"hidden_size", 0}, {"vocab_size", -20}}) {
    auto bad = config;
    bad[key] = value;
    testing::write_file(config_path, bad.dump());
    expect_error_line(run_ctitan(generate), config_path + ": key '" + key + "' must be");
  }
  // Python's json.dump writes NaN, which is not JSON.
  auto text = config.dump();
  auto eps = text.find("\"rms_norm_eps\":");
  text.replace(eps, text.find_first_of(",}", eps) - eps, "\"rms_norm_eps\":NaN");
  testing::write_file(config_path, text);
  expect_error_line(run_ctitan(generate), config_path + ": not valid JSON");
  testing::write_file(config_path, config.dump());
  ASSERT_EQ(run_ctitan(generate).exit_code, 0);

  // The first tensor of the file gets an element count that wraps to 0 in 64 bits.
  const auto weights = dir.file("hf/model.safetensors");
  auto bytes = testing::read_file(weights);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  const uint64_t big = uint64_t(1) << 62;
  header["lm_head.weight"]["shape"] = {big, big};
  std::string new_header = header.dump();
  new_header.append((8 - new_header.size() % 8) % 8, ' ');
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char((uint64_t(new_header.size()) >> (8 * i)) & 0xff);
  testing::write_file(weights, len + new_header + bytes.substr(8 + n));
  expect_error_line(run_ctitan(generate), "safetensors " + weights + ": tensor 'lm_head.weight' has shape");
}

}  // namespace
}  // namespace ctitan
