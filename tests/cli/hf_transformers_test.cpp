// HF export/import checked against the real Hugging Face libraries (the venv's transformers and
// safetensors, via tests/cli/hf_transformers_reference.py): transformers' LlamaForCausalLM loads
// our export and computes our logits and greedy ids; a model saved by transformers imports into
// ctitan with transformers' logits; the safetensors library reads every tensor we write.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <tuple>

#include "ctitan/checkpoint/hf/hf_export.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/checkpoint/hf/hf_names.h"
#include "ctitan/checkpoint/metadata.h"
#include "ctitan/checkpoint/model_io.h"
#include "ctitan/config/config_manager.h"
#include "ctitan/models/common/transformer.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/train/model_builder.h"
#include "ctitan/train/trainer.h"
#include "support/python_worker.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;
using testing::TempDir;
using testing::concat;
using testing::run_ctitan;

const char* kNoTransformersPython = "no venv Python (CTITAN_PYTHON is empty): transformers is the reference";
const std::string kTransformersScript = std::string(CTITAN_SOURCE_DIR) + "/tests/cli/hf_transformers_reference.py";

// Logits tolerance, |ours - transformers| <= kLogitTol * max(1, max |logit|), elementwise.
// Both sides are fp32 on CPU with bitwise-identical weights (fp32 export; the q/k row permutation
// only moves rows), so they differ only by summation order: blocked GEMMs, eager softmax versus
// ctitan's attention kernel, RMSNorm and RoPE tables computed by different code. One fp32 dot
// product of length K <= 256 is off by about sqrt(K) * 6e-8 ~ 1e-6 relative to the sum of |terms|;
// two blocks, the norms and the head compound that to a few 1e-7 of the largest logit (measured
// 1.0e-7 to 4.4e-7; each test prints its figure). 1e-4 leaves a margin of 200x and more, and is
// still over 1000 times below what a convention error does: q/k left in HF's row order (the
// negative control in expect_imported_logits_match) moves logits by 0.26-0.47 of their scale.
constexpr double kLogitTol = 1e-4;

struct Compared {
  double max_abs_diff = 0, scale = 1;
  bool ok() const { return max_abs_diff <= kLogitTol * scale; }
  std::string str() const {
    return fmt::format("max |ctitan - transformers| = {:.3g}, scale max(1, max|logit|) = {:.3g}, ratio {:.3g} "
                       "(tolerance {:.0e})", max_abs_diff, scale, max_abs_diff / scale, kLogitTol);
  }
};

// Runs a subcommand of the reference script in the test program's one Python worker; its JSON
// result goes through a file (the worker's output mixes stdout and stderr, and transformers
// prints progress bars).
nlohmann::json reference(const TempDir& dir, const std::string& name, std::vector<std::string> args) {
  static testing::PythonWorker worker(kTransformersScript);
  auto out = dir.file(name + ".json");
  args.push_back("--out");
  args.push_back(out);
  RunResult r = worker.run(args);
  args.insert(args.begin(), kTransformersScript);  // for the message: the command to rerun by hand
  if (r.exit_code != 0 || !fs::exists(out)) {
    ADD_FAILURE() << "reference script failed (exit " << r.exit_code << "): " << fmt::format("{}", fmt::join(args, " "))
                  << "\n" << r.output;
    return nullptr;
  }
  return nlohmann::json::parse(testing::read_file(out));
}

// The JSON object `generate --json` prints as its last line.
nlohmann::json transformers_json_result(const RunResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto end = r.output.find_last_not_of('\n');
  auto start = r.output.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return nlohmann::json::parse(r.output.substr(start, end + 1 - start), nullptr, /*allow_exceptions=*/false);
}

std::string ids_arg(const std::vector<int64_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

// Greedy ids are implementation-independent only where each pick leads the runner-up by more
// than two fp32 implementations can disagree on a logit: kLogitTol * max|logit| <= 1e-4 * 60 here.
// Below 1e-2 a mismatch could be a legitimate near-tie, so the prompt is a bad test, not a bug.
constexpr double kMinGreedyMargin = 1e-2;

// `ours`: what `generate --json` printed; `run`: one entry of the reference's greedy "runs".
void expect_same_greedy_ids(const nlohmann::json& ours, const nlohmann::json& run, const std::string& what) {
  ASSERT_TRUE(ours.is_object()) << what << ": generate printed no JSON";
  ASSERT_GT(run["min_margin"].get<double>(), kMinGreedyMargin) << what << ": a near-tie, pick another prompt";
  EXPECT_EQ(ours["ids"].get<std::vector<int64_t>>(), run["ids"].get<std::vector<int64_t>>())
      << what << ": ctitan " << ours["ids"].dump() << " vs transformers " << run["ids"].dump()
      << " (transformers' smallest top-1 lead " << run["min_margin"] << ")";
  std::cout << "[ " << what << " ] " << run["ids"].size() << " greedy ids, smallest top-1 lead "
            << run["min_margin"] << "\n";
}

// ctitan's own forward, fp32, in process: (T, vocab) logits for one sequence.
torch::Tensor ctitan_logits(const StateDict& state, const models::ModelArgs& args,
                            const std::vector<int64_t>& ids) {
  models::Transformer model(args);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().copy_(require_state(state, p.key()).to(torch::kFloat));
  model->eval();
  auto tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);  // (1, T)
  return model->forward(tokens)[0];
}

Compared compare(const torch::Tensor& ours, const nlohmann::json& theirs) {
  auto shape = theirs["shape"].get<std::vector<int64_t>>();
  std::vector<float> flat;
  for (const auto& row : theirs["logits"]) {
    for (const auto& v : row) flat.push_back(v.get<float>());
  }
  auto ref = torch::tensor(flat).view(shape);
  EXPECT_EQ(ours.sizes().vec(), shape);
  Compared c;
  c.max_abs_diff = (ours.to(torch::kDouble) - ref.to(torch::kDouble)).abs().max().item<double>();
  c.scale = std::max(1.0, ref.abs().max().item<double>());
  return c;
}

// The tiny job (dim 64, 2 layers, 4 heads, vocab 32, learns the cycle 0..15), trained once per
// test binary and exported in fp32 with the library.
struct TrainedExport {
  TempDir dir;
  StateDict state;
  models::ModelArgs args;
  fs::path hf;
};
// Trains the job `config_for(dir)` describes and exports it in fp32 with the library.
std::unique_ptr<TrainedExport> train_and_export(const std::function<config::JobConfig(const std::string&)>& config_for) {
  auto t = std::make_unique<TrainedExport>();
  train::Trainer trainer(config_for(t->dir.path()));
  trainer.train();
  auto states = trainer.state_dicts();  // by value: a range-for over .at() of the temporary would dangle
  for (const auto& [k, v] : states.at("model")) t->state[k] = v.detach().clone();
  t->args = trainer.model().args();
  t->hf = t->dir.path() / "hf";
  checkpoint::hf::export_hf(t->state, t->args, {}, t->hf);
  return t;
}

const TrainedExport& trained() {
  // Destroyed at exit, which removes its directory.
  static const auto t = train_and_export([](const std::string& dir) { return testing::tiny_job_config(dir); });
  return *t;
}

// Ids on and off the trained cycle (16..31 never occur in training), 16 positions, so that RoPE
// acts at many offsets and the logits are not all one confident pattern.
const std::vector<int64_t> kTinyIds{3, 4, 5, 6, 7, 20, 31, 0, 1, 2, 9, 9, 15, 16, 30, 8};

// (a) transformers loads our export and computes our logits.
TEST(CliHfTransformers, ExportedTinyJobLogitsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  const auto& t = trained();
  TempDir work;
  auto ref = reference(work, "logits", {"logits", "--model", t.hf.string(), "--ids", ids_arg(kTinyIds)});
  ASSERT_FALSE(ref.is_null());
  // The hyperparameters tensors do not carry must reach transformers through config.json.
  EXPECT_EQ(ref["config"]["rope_theta"].get<double>(), t.args.rope_theta) << ref["config"].dump();
  EXPECT_EQ(ref["config"]["rms_norm_eps"].get<double>(), t.args.norm_eps) << ref["config"].dump();
  EXPECT_EQ(ref["config"]["tie_word_embeddings"], false);
  auto c = compare(ctitan_logits(t.state, t.args, kTinyIds), ref);
  EXPECT_TRUE(c.ok()) << c.str();
  std::cout << "[ tiny job export ] " << c.str() << "\n";
}

// (b) `ctitan generate --temperature 0` (KV-cached) picks the ids transformers' argmax picks.
TEST(CliHfTransformers, GenerateGreedyIdsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  const auto& t = trained();
  TempDir work;
  // On the cycle, and off it (tokens never trained on: the model's choice is its own, not the data's).
  const std::vector<std::string> prompts{"3,4,5,6", "30,17,5,9,21"};
  const std::string n = "20";
  auto ref = reference(work, "greedy", {"greedy", "--model", t.hf.string(), "--ids", prompts[0], prompts[1], "--n", n});
  ASSERT_FALSE(ref.is_null());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ours = transformers_json_result(run_ctitan({"generate", "--checkpoint", t.hf.string(), "--prompt-ids", prompts[i],
                                        "--max-new-tokens", n, "--temperature", "0", "--json"}));
    expect_same_greedy_ids(ours, ref["runs"][i], "tiny job, prompt " + prompts[i]);
  }
}

// An HF directory saved by transformers, imported by the library, gives transformers' logits.
void expect_imported_logits_match(const TempDir& work, const fs::path& hf_dir, const std::string& label) {
  const std::vector<int64_t> ids{1, 2, 3, 200, 17, 255, 0, 64, 64, 9, 100, 31};
  auto ref = reference(work, "logits", {"logits", "--model", hf_dir.string(), "--ids", ids_arg(ids)});
  ASSERT_FALSE(ref.is_null());
  checkpoint::hf::HfModel hf;
  ASSERT_NO_THROW(hf = checkpoint::hf::import_hf(hf_dir));
  EXPECT_EQ(hf.args.rope_theta, ref["config"]["rope_theta"].get<double>());
  EXPECT_EQ(hf.args.norm_eps, ref["config"]["rms_norm_eps"].get<double>());
  EXPECT_EQ(hf.args.kv_heads(), ref["config"]["num_key_value_heads"].get<int64_t>());
  auto c = compare(ctitan_logits(hf.model, hf.args, ids), ref);
  EXPECT_TRUE(c.ok()) << label << ": " << c.str();
  std::cout << "[ " << label << " ] " << c.str() << "\n";

  // Negative control: the same weights without the q/k row permutation (HF's rotate_half layout
  // read as if it were ours) must fail the tolerance by far, or the comparison proves nothing.
  auto wrong = hf.model;
  for (int64_t i = 0; i < hf.args.n_layers; ++i) {
    auto q = fmt::format("layers.{}.attention.wq.weight", i), k = fmt::format("layers.{}.attention.wk.weight", i);
    wrong[q] = checkpoint::hf::permute_rows_to_hf(wrong[q], hf.args.n_heads);
    wrong[k] = checkpoint::hf::permute_rows_to_hf(wrong[k], hf.args.kv_heads());
  }
  auto w = compare(ctitan_logits(wrong, hf.args, ids), ref);
  EXPECT_GT(w.max_abs_diff, 100 * kLogitTol * w.scale) << "unpermuted q/k went unnoticed: " << w.str();
  std::cout << "[ " << label << ", q/k left in HF row order ] " << w.str() << "\n";
}

// (c) A model saved by transformers itself (GQA 4/2 heads, rope_theta 10000, rms_norm_eps 1e-6:
// transformers' defaults, not ctitan's), exactly as save_pretrained writes it.
TEST(CliHfTransformers, TransformersSavedGqaModelImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  auto saved = work.path() / "saved";
  ASSERT_FALSE(reference(work, "save", {"save-random", "--dir", saved.string()}).is_null());
  // transformers 5 writes RoPE as {"rope_parameters": {"rope_type", "rope_theta"}} and the dtype as
  // "dtype"; 4.x wrote top-level "rope_theta"/"rope_scaling" and "torch_dtype".
  try {
    checkpoint::hf::import_hf(saved);
  } catch (const std::exception& e) {
    FAIL() << "ctitan cannot import what transformers' save_pretrained wrote: " << e.what() << "\nconfig.json:\n"
           << testing::read_file((saved / "config.json").string());
  }
  expect_imported_logits_match(work, saved, "transformers-saved GQA");
}

// (c, numerics) The same kind of model with config.json in the 4.x key layout that most Hub
// Llama checkpoints carry, so the import's weights and conventions are checked whatever the
// config reader does with 5.x keys.
TEST(CliHfTransformers, LegacyConfigGqaModelImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  auto saved = work.path() / "saved";
  ASSERT_FALSE(reference(work, "save", {"save-random", "--dir", saved.string(), "--legacy-config"}).is_null());
  expect_imported_logits_match(work, saved, "legacy-config GQA");
}

// (c, tied) tie_word_embeddings: save_pretrained writes no lm_head.weight; the import must reuse
// the embeddings as the head.
// save-random with `save_args` and --tie: a checkpoint without lm_head.weight, imported.
void expect_tied_import_matches(const std::vector<std::string>& save_args, const std::string& label) {
  TempDir work;
  auto saved = work.path() / "saved";
  auto save = reference(work, "save", concat({"save-random", "--dir", saved.string(), "--tie"}, save_args));
  ASSERT_FALSE(save.is_null());
  auto names = save["saved_tensors"].get<std::vector<std::string>>();
  ASSERT_EQ(std::count(names.begin(), names.end(), "lm_head.weight"), 0) << "not a tied checkpoint; the test checks nothing";
  expect_imported_logits_match(work, saved, label);
}

TEST(CliHfTransformers, TiedEmbeddingsModelImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  expect_tied_import_matches({"--legacy-config", "--seed", "1"}, "tied GQA");
}

// (c, CLI) `ctitan checkpoint import` into a step directory, then `ctitan generate` from it,
// against transformers' greedy ids on the original HF directory.
// save-random with `save_args` into work/saved, `ctitan checkpoint import` into work/step-0, then
// `ctitan generate` from the step directory against transformers' greedy ids on the HF directory.
// Returns the greedy reference (its "config" is what transformers read), or null on failure.
nlohmann::json expect_import_then_generate_matches(const TempDir& work, const std::vector<std::string>& save_args,
                                                   const std::string& label) {
  auto saved = work.path() / "saved", step = work.path() / "step-0";
  if (reference(work, "save", concat({"save-random", "--dir", saved.string()}, save_args)).is_null()) return nullptr;
  auto imp = run_ctitan({"checkpoint", "import", "--input", saved.string(), "--output", step.string()});
  EXPECT_EQ(imp.exit_code, 0) << imp.output;
  if (imp.exit_code != 0) return nullptr;
  const std::string prompt = "5,77,140,3,250";
  auto ref = reference(work, "greedy", {"greedy", "--model", saved.string(), "--ids", prompt, "--n", "16"});
  if (ref.is_null()) return nullptr;
  auto ours = transformers_json_result(run_ctitan({"generate", "--checkpoint", step.string(), "--prompt-ids", prompt,
                                      "--max-new-tokens", "16", "--temperature", "0", "--json"}));
  expect_same_greedy_ids(ours, ref["runs"][0], label);
  return ref;
}

TEST(CliHfTransformers, CheckpointImportThenGenerateMatchesTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  auto ref = expect_import_then_generate_matches(work, {"--legacy-config", "--seed", "2"}, "imported step dir");
  ASSERT_FALSE(ref.is_null());
  auto saved = work.path() / "saved", step = work.path() / "step-0";

  // Diagnosis. The weights: the step directory holds exactly what the library import reads.
  auto hf = checkpoint::hf::import_hf(saved);
  auto stored = checkpoint::load_full_model_state(step);
  ASSERT_EQ(stored.size(), hf.model.size());
  for (const auto& [name, w] : hf.model) {
    EXPECT_TRUE(torch::equal(require_state(stored, name), w.to(torch::kFloat))) << name << " changed by checkpoint import";
  }
  // The hyperparameters tensors do not carry, as the step directory gives them to `generate`
  // (read as cli::open_model_source reads it), against what transformers read from config.json.
  auto job = config::parse_job_config(checkpoint::read_metadata(step).config_toml, "step metadata");
  auto args = train::model_args_from_config(job, nullptr);
  EXPECT_EQ(args.rope_theta, ref["config"]["rope_theta"].get<double>()) << "rope_theta lost by checkpoint import";
  EXPECT_EQ(args.norm_eps, ref["config"]["rms_norm_eps"].get<double>()) << "rms_norm_eps lost by checkpoint import";
}

// (d) The safetensors library reads every tensor of our export, fp32 single file and bf16
// shards, with the right names, shapes, dtypes and values.
TEST(CliHfTransformers, SafetensorsLibraryReadsEveryExportedTensor) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  const auto& t = trained();
  TempDir work;
  auto bf16 = work.path() / "bf16";
  auto exp = run_ctitan({"checkpoint", "export", "--input", t.hf.string(), "--output", bf16.string(), "--dtype",
                         "bfloat16", "--max-shard-size", "20KB"});
  ASSERT_EQ(exp.exit_code, 0) << exp.output;

  // Every safetensors file of both exports, read by one Python process (each start costs seconds).
  const std::vector<std::tuple<fs::path, torch::ScalarType, std::string>> exports{
      {t.hf, torch::kFloat, "F32"}, {bf16, torch::kBFloat16, "BF16"}};
  std::vector<std::string> cmd{"read-safetensors", "--file"};
  std::map<std::string, size_t> export_of;  // file -> index into exports
  for (size_t i = 0; i < exports.size(); ++i) {
    for (const auto& e : fs::directory_iterator(std::get<0>(exports[i]))) {
      if (e.path().extension() != ".safetensors") continue;
      cmd.push_back(e.path().string());
      export_of[e.path().string()] = i;
    }
  }
  auto read = reference(work, "read", cmd);
  ASSERT_FALSE(read.is_null());
  ASSERT_EQ(read["files"].size(), export_of.size());
  EXPECT_GT(export_of.size(), 2u) << "the bf16 export should be sharded";

  for (size_t i = 0; i < exports.size(); ++i) {
    const auto& [dir, dtype, code] = exports[i];
    // What each HF tensor must be: ours, cast, with q/k rows in HF's order.
    std::map<std::string, torch::Tensor> expected;
    for (const auto& [fqn, v] : t.state) {
      auto w = v.to(dtype);
      if (fqn.find("attention.wq") != std::string::npos) w = checkpoint::hf::permute_rows_to_hf(w, t.args.n_heads);
      if (fqn.find("attention.wk") != std::string::npos) w = checkpoint::hf::permute_rows_to_hf(w, t.args.kv_heads());
      expected[checkpoint::hf::to_hf_name(fqn)] = w.contiguous();
    }
    std::set<std::string> seen;
    for (const auto& entry : read["files"]) {
      const auto file = entry["file"].get<std::string>();
      if (export_of.at(file) != i) continue;
      EXPECT_EQ(entry["metadata"], nlohmann::json({{"format", "pt"}})) << file;
      for (const auto& [name, info] : entry["tensors"].items()) {
        EXPECT_TRUE(seen.insert(name).second) << name << " in two files of " << dir;
        auto it = expected.find(name);
        if (it == expected.end()) {
          ADD_FAILURE() << file << ": unexpected tensor " << name;
          continue;
        }
        const auto& w = it->second;
        EXPECT_EQ(info["dtype"], code) << name;
        EXPECT_EQ(info["shape"].get<std::vector<int64_t>>(), w.sizes().vec()) << name;
        EXPECT_EQ(info["tensor_shape"].get<std::vector<int64_t>>(), w.sizes().vec()) << name;
        // Sums in float64 of the stored values: equal up to float64 summation order.
        auto f64 = w.to(torch::kDouble);
        double sum = f64.sum().item<double>(), bound = 1e-9 * (1.0 + f64.abs().sum().item<double>());
        EXPECT_NEAR(info["sum"].get<double>(), sum, bound) << name;
        // wsum weights each element by its flat index: catches misplaced rows that a sum cannot.
        auto weights = torch::arange(f64.numel(), torch::kDouble).remainder(7) + 1;
        double wsum = (f64.flatten() * weights).sum().item<double>();
        EXPECT_NEAR(info["wsum"].get<double>(), wsum, 7 * bound) << name;
      }
    }
    std::set<std::string> names;
    for (const auto& [n, _] : expected) names.insert(n);
    EXPECT_EQ(seen, names) << dir;
  }
  EXPECT_TRUE(fs::exists(bf16 / "model.safetensors.index.json"));
}

// ---- Qwen3 (Qwen3ForCausalLM): QK-norm, head_dim apart from dim / n_heads, RoPE θ 1e6 ----

// The tiny job as a Qwen3: 4 query heads of 32 (dim / n_heads would be 16) over 2 kv heads.
config::JobConfig tiny_qwen3_job(const std::string& dir) {
  auto c = testing::tiny_job_config(dir);
  c.model.name = "qwen3";
  c.model.flavor = "debugmodel";
  c.model.hidden_dim = 128;
  return c;
}

const TrainedExport& trained_qwen3() {
  static const auto t = train_and_export(tiny_qwen3_job);
  return *t;
}

// (a, b for Qwen3) transformers' Qwen3ForCausalLM loads our export and computes our logits, and
// `ctitan generate` picks its greedy ids.
TEST(CliHfTransformers, ExportedQwen3LogitsAndGreedyIdsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  const auto& t = trained_qwen3();
  ASSERT_TRUE(t.args.qk_norm);
  ASSERT_EQ(t.args.head_dim(), 32);
  TempDir work;
  auto ref = reference(work, "logits", {"logits", "--model", t.hf.string(), "--ids", ids_arg(kTinyIds)});
  ASSERT_FALSE(ref.is_null());
  EXPECT_EQ(ref["config"]["architecture"], "Qwen3ForCausalLM") << ref["config"].dump();
  EXPECT_EQ(ref["config"]["head_dim"], 32) << ref["config"].dump();
  EXPECT_EQ(ref["config"]["rope_theta"].get<double>(), 1e6) << ref["config"].dump();
  EXPECT_EQ(ref["config"]["rms_norm_eps"].get<double>(), 1e-6) << ref["config"].dump();
  auto c = compare(ctitan_logits(t.state, t.args, kTinyIds), ref);
  EXPECT_TRUE(c.ok()) << c.str();
  std::cout << "[ tiny Qwen3 export ] " << c.str() << "\n";

  const std::string prompt = "3,4,5,6";
  auto greedy = reference(work, "greedy", {"greedy", "--model", t.hf.string(), "--ids", prompt, "--n", "20"});
  ASSERT_FALSE(greedy.is_null());
  auto ours = transformers_json_result(run_ctitan({"generate", "--checkpoint", t.hf.string(), "--prompt-ids", prompt,
                                      "--max-new-tokens", "20", "--temperature", "0", "--json"}));
  expect_same_greedy_ids(ours, greedy["runs"][0], "tiny Qwen3, prompt " + prompt);
}

// (a, tied Qwen3) A tied model (Qwen3-0.6B's layout, at the tiny job's size) exports with
// tie_word_embeddings and no lm_head.weight, and transformers computes its logits.
TEST(CliHfTransformers, ExportedTiedQwen3LogitsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  auto args = models::model_flavor("qwen3", "0.6B");
  args.dim = 64; args.n_layers = 2; args.n_heads = 4; args.n_kv_heads = 2; args.explicit_head_dim = 32;
  args.ffn_dim = 128; args.vocab_size = 256; args.max_seq_len = 64;
  ASSERT_TRUE(args.tie_word_embeddings);
  torch::manual_seed(7);
  models::Transformer model(args);
  models::init_weights(*model);
  StateDict state;
  {
    torch::NoGradGuard no_grad;
    // Norm weights away from 1, so that a misplaced QK-norm weight shows.
    for (const auto& p : model->named_parameters()) {
      auto t = p.value().detach().clone();
      if (t.dim() == 1) t.add_(torch::randn_like(t) * 0.2);
      state[p.key()] = t;
    }
  }
  TempDir work;
  auto hf = work.path() / "hf";
  checkpoint::hf::export_hf(state, args, {}, hf);
  EXPECT_FALSE(testing::read_file((hf / "model.safetensors").string()).find("lm_head") != std::string::npos);
  const std::vector<int64_t> ids{1, 2, 3, 200, 17, 255, 0, 64, 64, 9};
  auto ref = reference(work, "logits", {"logits", "--model", hf.string(), "--ids", ids_arg(ids)});
  ASSERT_FALSE(ref.is_null());
  EXPECT_EQ(ref["config"]["tie_word_embeddings"], true) << ref["config"].dump();
  EXPECT_EQ(ref["config"]["architecture"], "Qwen3ForCausalLM") << ref["config"].dump();
  auto c = compare(ctitan_logits(state, args, ids), ref);
  EXPECT_TRUE(c.ok()) << c.str();
  std::cout << "[ tied Qwen3 export ] " << c.str() << "\n";
}

// (c for Qwen3) A Qwen3ForCausalLM saved by transformers imports with its logits. Its norm
// weights are random, so the QK-norms' reordering into our RoPE layout is checked too: left in
// HF's order (the negative control), the logits move by far.
TEST(CliHfTransformers, TransformersSavedQwen3ImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  auto saved = work.path() / "saved";
  ASSERT_FALSE(reference(work, "save", {"save-random", "--family", "qwen3", "--dir", saved.string(), "--head-dim", "32",
                                        "--rope-theta", "1000000", "--seed", "3"})
                   .is_null());
  checkpoint::hf::HfModel hf;
  ASSERT_NO_THROW(hf = checkpoint::hf::import_hf(saved));
  EXPECT_EQ(hf.args.family, "qwen3");
  EXPECT_TRUE(hf.args.qk_norm);
  EXPECT_EQ(hf.args.head_dim(), 32);
  expect_imported_logits_match(work, saved, "transformers-saved Qwen3");

  const std::vector<int64_t> ids{1, 2, 3, 200, 17, 255, 0, 64};
  auto ref = reference(work, "logits2", {"logits", "--model", saved.string(), "--ids", ids_arg(ids)});
  ASSERT_FALSE(ref.is_null());
  auto wrong = hf.model;
  for (int64_t i = 0; i < hf.args.n_layers; ++i) {
    for (const char* norm : {"q_norm", "k_norm"}) {
      auto name = fmt::format("layers.{}.attention.{}.weight", i, norm);
      wrong[name] = checkpoint::hf::permute_head_norm_to_hf(wrong[name]);
    }
  }
  auto w = compare(ctitan_logits(wrong, hf.args, ids), ref);
  EXPECT_GT(w.max_abs_diff, 100 * kLogitTol * w.scale) << "QK-norms in HF order went unnoticed: " << w.str();
  std::cout << "[ transformers-saved Qwen3, QK-norms left in HF order ] " << w.str() << "\n";
}

// (c, tied, Qwen3) Qwen3-0.6B's layout: tie_word_embeddings, no lm_head.weight in the files.
TEST(CliHfTransformers, TiedQwen3ImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  expect_tied_import_matches({"--family", "qwen3", "--head-dim", "32", "--seed", "4"}, "tied Qwen3");
}

// (c, CLI, Qwen3) `checkpoint import` writes a job config that rebuilds the Qwen3 (model.name,
// head_dim, hidden_dim), and `generate` from the step directory picks transformers' ids.
TEST(CliHfTransformers, Qwen3CheckpointImportThenGenerateMatchesTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  ASSERT_FALSE(expect_import_then_generate_matches(work, {"--family", "qwen3", "--head-dim", "32", "--seed", "5"},
                                                   "imported Qwen3 step dir")
                   .is_null());
  auto job = config::parse_job_config(checkpoint::read_metadata(work.path() / "step-0").config_toml, "step metadata");
  EXPECT_EQ(job.model.name, "qwen3");
  EXPECT_EQ(job.model.head_dim, 32);
}

// ---- Qwen3-MoE (Qwen3MoeForCausalLM): router, 8 experts stored one per tensor in HF ----

// The tiny job as a Qwen3-MoE: 8 experts of 32, top 2 renormalised, Qwen3's attention. Without
// the selection bias, which HF's model lacks: the export is then exactly the trained model.
config::JobConfig tiny_qwen3_moe_job(const std::string& dir) {
  auto c = testing::tiny_job_config(dir);
  c.model.name = "qwen3_moe";
  c.model.flavor = "debugmodel";
  c.model.head_dim = 16;
  c.model.moe_hidden_dim = 32;
  c.model.load_balance_coeff = 0;
  return c;
}

const TrainedExport& trained_qwen3_moe() {
  static const auto t = train_and_export(tiny_qwen3_moe_job);
  return *t;
}

// (a, b for Qwen3-MoE) transformers' Qwen3MoeForCausalLM loads our export (experts split one per
// tensor, in id order) and computes our logits, and `ctitan generate` picks its greedy ids. The
// routing is discrete, so equal logits also say both chose the same experts for every token.
TEST(CliHfTransformers, ExportedQwen3MoeLogitsAndGreedyIdsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  const auto& t = trained_qwen3_moe();
  ASSERT_EQ(t.args.moe.num_experts, 8);
  TempDir work;
  auto ref = reference(work, "logits", {"logits", "--model", t.hf.string(), "--ids", ids_arg(kTinyIds)});
  ASSERT_FALSE(ref.is_null());
  EXPECT_EQ(ref["config"]["architecture"], "Qwen3MoeForCausalLM") << ref["config"].dump();
  auto c = compare(ctitan_logits(t.state, t.args, kTinyIds), ref);
  EXPECT_TRUE(c.ok()) << c.str();
  std::cout << "[ tiny Qwen3-MoE export ] " << c.str() << "\n";

  const std::string prompt = "3,4,5,6";
  auto greedy = reference(work, "greedy", {"greedy", "--model", t.hf.string(), "--ids", prompt, "--n", "20"});
  ASSERT_FALSE(greedy.is_null());
  auto ours = transformers_json_result(run_ctitan({"generate", "--checkpoint", t.hf.string(), "--prompt-ids", prompt,
                                      "--max-new-tokens", "20", "--temperature", "0", "--json"}));
  expect_same_greedy_ids(ours, greedy["runs"][0], "tiny Qwen3-MoE, prompt " + prompt);
}

// (c for Qwen3-MoE) A Qwen3MoeForCausalLM saved by transformers, with 12 experts so that ids 10
// and 11 sort before 2 as strings, imports with its logits. Negative control: the experts
// stacked in string order move the logits by far.
TEST(CliHfTransformers, TransformersSavedQwen3MoeImportsWithSameLogitsAndExpertOrder) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  TempDir work;
  auto saved = work.path() / "saved";
  ASSERT_FALSE(reference(work, "save", {"save-random", "--family", "qwen3_moe", "--dir", saved.string(), "--head-dim",
                                        "16", "--experts", "12", "--top-k", "3", "--moe-ffn", "24", "--rope-theta",
                                        "1000000", "--seed", "6"})
                   .is_null());
  checkpoint::hf::HfModel hf;
  ASSERT_NO_THROW(hf = checkpoint::hf::import_hf(saved));
  EXPECT_EQ(hf.args.family, "qwen3_moe");
  EXPECT_EQ(hf.args.moe.num_experts, 12);
  EXPECT_EQ(hf.args.moe.top_k, 3);
  EXPECT_EQ(hf.args.moe.hidden_dim, 24);
  EXPECT_TRUE(hf.args.moe.route_norm);
  expect_imported_logits_match(work, saved, "transformers-saved Qwen3-MoE");

  const std::vector<int64_t> ids{1, 2, 3, 200, 17, 255, 0, 64};
  auto ref = reference(work, "logits2", {"logits", "--model", saved.string(), "--ids", ids_arg(ids)});
  ASSERT_FALSE(ref.is_null());
  auto wrong = hf.model;
  // String order of 0..11: 0, 1, 10, 11, 2, ..., 9.
  std::vector<int64_t> string_order{0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9};
  auto index = torch::tensor(string_order, torch::kLong);
  for (int64_t i = 0; i < hf.args.n_layers; ++i) {
    for (const char* w : {"w1", "w2", "w3"}) {
      auto name = fmt::format("layers.{}.moe.experts.{}", i, w);
      wrong[name] = wrong[name].index_select(0, index);
    }
  }
  auto w = compare(ctitan_logits(wrong, hf.args, ids), ref);
  EXPECT_GT(w.max_abs_diff, 100 * kLogitTol * w.scale) << "experts in string order went unnoticed: " << w.str();
  std::cout << "[ transformers-saved Qwen3-MoE, experts in string order ] " << w.str() << "\n";
}

// ---- DeepSeek-V3 (DeepseekV3ForCausalLM): latent attention, shared expert, grouped sigmoid routing ----

// Experts stacked in string order of their ids (0, 1, 10, 11, 2, ...): what a sort of the HF
// names would give. For the negative controls.
StateDict experts_in_string_order(StateDict state, const models::ModelArgs& args) {
  std::vector<std::string> names;
  for (int64_t e = 0; e < args.moe.num_experts; ++e) names.push_back(std::to_string(e));
  std::sort(names.begin(), names.end());
  std::vector<int64_t> order;
  for (const auto& n : names) order.push_back(std::stoll(n));
  auto index = torch::tensor(order, torch::kLong);
  for (int64_t i = 0; i < args.n_layers; ++i) {
    for (const char* w : {"w1", "w2", "w3"}) {
      auto name = fmt::format("layers.{}.moe.experts.{}", i, w);
      if (state.count(name)) state[name] = state[name].index_select(0, index);
    }
  }
  return state;
}

// ctitan's logits for a state that carries the experts' selection bias (a buffer).
torch::Tensor ctitan_logits_with_bias(const StateDict& state, const models::ModelArgs& args,
                                      const std::vector<int64_t>& ids) {
  models::Transformer model(args);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().copy_(require_state(state, p.key()).to(torch::kFloat));
  for (auto& b : model->named_buffers()) b.value().copy_(require_state(state, b.key()));
  auto tokens = torch::tensor(ids, torch::kLong).unsqueeze(0);
  return model->forward(tokens)[0];
}

// (c for DeepSeek-V3) A DeepseekV3ForCausalLM saved by transformers (12 experts in 4 groups, a
// shared expert, a random e_score_correction_bias, the first layer dense), with a query latent
// and without, imports with its logits: latent attention, interleaved RoPE without any row
// permutation, the bias choosing. Negative control: experts in string order.
TEST(CliHfTransformers, TransformersSavedDeepseekV3ImportsWithSameLogits) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  for (const char* q_lora : {"24", "0"}) {
    TempDir work;
    auto saved = work.path() / "saved";
    ASSERT_FALSE(reference(work, "save", {"save-random", "--family", "deepseek_v3", "--dir", saved.string(), "--layers",
                                          "3", "--kv-heads", "4", "--experts", "12", "--top-k", "3", "--moe-ffn", "24",
                                          "--q-lora", q_lora, "--seed", "8"})
                     .is_null());
    checkpoint::hf::HfModel hf;
    ASSERT_NO_THROW(hf = checkpoint::hf::import_hf(saved));
    EXPECT_EQ(hf.args.family, "deepseek_v3");
    EXPECT_TRUE(hf.args.latent_attention());
    EXPECT_EQ(hf.args.q_lora_rank, std::stoll(q_lora));
    EXPECT_EQ(hf.args.moe.num_experts, 12);
    EXPECT_EQ(hf.args.moe.num_expert_groups, 4);
    EXPECT_EQ(hf.args.moe.n_dense_layers, 1);
    EXPECT_GT(hf.model.at("layers.1.moe.expert_bias").abs().max().item<float>(), 0.0f);  // read, not zeroed
    const std::vector<int64_t> ids{1, 2, 3, 200, 17, 255, 0, 64, 64, 9, 100, 31};
    auto ref = reference(work, "logits", {"logits", "--model", saved.string(), "--ids", ids_arg(ids)});
    ASSERT_FALSE(ref.is_null());
    EXPECT_EQ(ref["config"]["architecture"], "DeepseekV3ForCausalLM");
    auto c = compare(ctitan_logits_with_bias(hf.model, hf.args, ids), ref);
    EXPECT_TRUE(c.ok()) << "q_lora " << q_lora << ": " << c.str();
    std::cout << "[ transformers-saved DeepSeek-V3, q_lora " << q_lora << " ] " << c.str() << "\n";
    auto w = compare(ctitan_logits_with_bias(experts_in_string_order(hf.model, hf.args), hf.args, ids), ref);
    EXPECT_GT(w.max_abs_diff, 100 * kLogitTol * w.scale) << "experts in string order went unnoticed: " << w.str();
    std::cout << "[ transformers-saved DeepSeek-V3, experts in string order ] " << w.str() << "\n";
  }
}

// The tiny job as DeepSeek-V3's debug model (latent attention of rank 64, 8 experts in 4 groups,
// a shared expert, the first layer dense), with its selection bias trained: HF's model has one.
config::JobConfig tiny_deepseek_job(const std::string& dir) {
  auto c = testing::tiny_job_config(dir);
  c.model.name = "deepseek_v3";
  c.model.flavor = "debugmodel";
  c.model.moe_hidden_dim = 32;
  c.model.hidden_dim = 128;
  return c;
}

// (a, b for DeepSeek-V3) transformers' DeepseekV3ForCausalLM loads our export (the bias as
// e_score_correction_bias) and computes our logits; `ctitan generate` picks its greedy ids.
TEST(CliHfTransformers, ExportedDeepseekV3LogitsAndGreedyIdsMatchTransformers) {
  if (!testing::have_python()) GTEST_SKIP() << kNoTransformersPython;
  static const auto t = train_and_export(tiny_deepseek_job);
  ASSERT_TRUE(t->args.latent_attention());
  EXPECT_GT(t->state.at("layers.1.moe.expert_bias").abs().max().item<float>(), 0.0f);  // trained
  TempDir work;
  auto ref = reference(work, "logits", {"logits", "--model", t->hf.string(), "--ids", ids_arg(kTinyIds)});
  ASSERT_FALSE(ref.is_null());
  EXPECT_EQ(ref["config"]["architecture"], "DeepseekV3ForCausalLM") << ref["config"].dump();
  auto c = compare(ctitan_logits_with_bias(t->state, t->args, kTinyIds), ref);
  EXPECT_TRUE(c.ok()) << c.str();
  std::cout << "[ tiny DeepSeek-V3 export ] " << c.str() << "\n";
  const std::string prompt = "3,4,5,6";
  auto greedy = reference(work, "greedy", {"greedy", "--model", t->hf.string(), "--ids", prompt, "--n", "20"});
  ASSERT_FALSE(greedy.is_null());
  auto ours = transformers_json_result(run_ctitan({"generate", "--checkpoint", t->hf.string(), "--prompt-ids", prompt,
                                      "--max-new-tokens", "20", "--temperature", "0", "--json"}));
  expect_same_greedy_ids(ours, greedy["runs"][0], "tiny DeepSeek-V3, prompt " + prompt);
}

}  // namespace
}  // namespace ctitan
