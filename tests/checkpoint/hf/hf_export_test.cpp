// export_hf -> files on disk -> import_hf: exact round trips, HF names and layout, sharding, errors.
#include "ctitan/checkpoint/hf/hf_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <set>

#include "ctitan/checkpoint/hf/hf_config.h"
#include "ctitan/checkpoint/hf/hf_import.h"
#include "ctitan/checkpoint/hf/hf_names.h"
#include "ctitan/checkpoint/hf/safetensors.h"
#include "ctitan/common/error.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/models/common/parameter_shapes.h"
#include "ctitan/models/common/transformer.h"
#include "support/test_support.h"

namespace ctitan::checkpoint::hf {
namespace {

namespace fs = std::filesystem;
using models::ModelArgs;
using testing::TempDir;

// GQA (2 kv heads for 4) and an FFN size off the default formula, so both are carried through.
ModelArgs small_args() {
  ModelArgs args;
  args.dim = 32; args.n_layers = 2; args.n_heads = 4; args.n_kv_heads = 2; args.vocab_size = 300;
  args.multiple_of = 16; args.ffn_dim_multiplier = 1.3; args.norm_eps = 1e-6; args.rope_theta = 10000;
  args.max_seq_len = 64;
  return args;
}

StateDict random_state(const ModelArgs& args) {
  torch::manual_seed(3);
  models::Transformer model(args);
  models::init_weights(*model);
  StateDict state;
  for (const auto& p : model->named_parameters()) state[p.key()] = p.value().detach().clone();
  // Norm weights init to ones; perturb them so a swapped norm would show.
  for (auto& [name, t] : state) {
    if (t.dim() == 1) t.add_(torch::randn_like(t) * 0.1);
  }
  return state;
}

void expect_same_shape(const ModelArgs& a, const ModelArgs& b) {
  EXPECT_EQ(models::parameter_shapes(a), models::parameter_shapes(b));
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
}

TEST(HfExport, Fp32RoundTripIsBitwiseExact) {
  TempDir dir;
  auto args = small_args();
  auto state = random_state(args);
  EXPECT_EQ(export_hf(state, args, {}, dir.path() / "hf"), 1);
  auto hf = import_hf(dir.path() / "hf");
  expect_same_shape(hf.args, args);
  EXPECT_EQ(hf.dtype, torch::kFloat);
  ASSERT_EQ(hf.model.size(), state.size());
  for (const auto& [name, t] : state) EXPECT_TRUE(torch::equal(hf.model.at(name), t)) << name;
  EXPECT_TRUE(hf.tokenizer_path.empty());
  EXPECT_FALSE(fs::exists(dir.path() / "hf.partial"));
}

TEST(HfExport, FilesUseHfNamesRowOrderAndConfig) {
  TempDir dir;
  auto args = small_args();
  auto state = random_state(args);
  export_hf(state, args, {}, dir.path() / "hf");
  auto file = load_safetensors(dir.path() / "hf" / "model.safetensors");
  EXPECT_EQ(file.metadata.at("format"), "pt");
  const auto& t = file.tensors;
  EXPECT_TRUE(torch::equal(t.at("model.embed_tokens.weight"), state.at("tok_embeddings.weight")));
  EXPECT_TRUE(torch::equal(t.at("lm_head.weight"), state.at("output.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.norm.weight"), state.at("norm.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.layers.1.mlp.gate_proj.weight"), state.at("layers.1.feed_forward.w1.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.layers.1.mlp.up_proj.weight"), state.at("layers.1.feed_forward.w3.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.layers.1.mlp.down_proj.weight"), state.at("layers.1.feed_forward.w2.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.layers.0.self_attn.v_proj.weight"), state.at("layers.0.attention.wv.weight")));
  EXPECT_TRUE(torch::equal(t.at("model.layers.0.post_attention_layernorm.weight"), state.at("layers.0.ffn_norm.weight")));
  // q and k are stored permuted per head (q over 4 heads, k over its 2 kv heads).
  EXPECT_TRUE(torch::equal(t.at("model.layers.0.self_attn.q_proj.weight"),
                           permute_rows_to_hf(state.at("layers.0.attention.wq.weight"), 4)));
  EXPECT_TRUE(torch::equal(t.at("model.layers.0.self_attn.k_proj.weight"),
                           permute_rows_to_hf(state.at("layers.0.attention.wk.weight"), 2)));

  auto config = nlohmann::json::parse(testing::read_file((dir.path() / "hf" / "config.json").string()));
  EXPECT_EQ(config["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(config["hidden_size"], 32);
  EXPECT_EQ(config["intermediate_size"], args.ffn_hidden_dim());
  EXPECT_EQ(config["intermediate_size"], state.at("layers.0.feed_forward.w1.weight").size(0));
  EXPECT_EQ(config["num_attention_heads"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["num_hidden_layers"], 2);
  EXPECT_EQ(config["vocab_size"], 300);
  EXPECT_EQ(config["rms_norm_eps"], 1e-6);
  EXPECT_EQ(config["rope_theta"], 10000.0);
  EXPECT_EQ(config["max_position_embeddings"], 64);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["hidden_act"], "silu");
}

TEST(HfExport, ShardsWithAnIndexAndBf16) {
  TempDir dir;
  auto args = small_args();
  auto state = random_state(args);
  HfExportOptions options;
  options.dtype = torch::kBFloat16;
  options.max_shard_bytes = 8000;  // the 300x32 bf16 embedding (19200 B) alone exceeds it
  int files = export_hf(state, args, options, dir.path() / "hf");
  EXPECT_GT(files, 2);
  EXPECT_FALSE(fs::exists(dir.path() / "hf" / "model.safetensors"));
  auto index = nlohmann::json::parse(testing::read_file((dir.path() / "hf" / "model.safetensors.index.json").string()));
  int64_t total = 0;
  std::set<std::string> shard_files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    auto shard = load_safetensors(dir.path() / "hf" / file.get<std::string>());
    ASSERT_TRUE(shard.tensors.count(name)) << name << " not in " << file;
    total += tensor_bytes(shard.tensors.at(name));
    shard_files.insert(file.get<std::string>());
    // Only a tensor too big on its own may make a shard exceed the limit.
    if (fs::file_size(dir.path() / "hf" / file.get<std::string>()) > 8000 + 1000) {
      EXPECT_EQ(shard.tensors.size(), 1u);
    }
  }
  EXPECT_EQ(index["weight_map"].size(), state.size());
  EXPECT_EQ(int(shard_files.size()), files);
  EXPECT_EQ(index["metadata"]["total_size"], total);

  auto hf = import_hf(dir.path() / "hf");
  EXPECT_EQ(hf.dtype, torch::kBFloat16);
  for (const auto& [name, t] : state) {
    EXPECT_EQ(hf.model.at(name).scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(hf.model.at(name), t.to(torch::kBFloat16))) << name;
  }
}

TEST(HfExport, CopiesTheTokenizerAndNamesItsSpecialTokens) {
  TempDir dir;
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  data::Tokenizer::from_ranks(bytes).save(dir.file("tok.model"));
  HfExportOptions options;
  options.tokenizer_path = dir.file("tok.model");
  auto args = small_args();
  export_hf(random_state(args), args, options, dir.path() / "hf");
  EXPECT_EQ(testing::read_file((dir.path() / "hf" / "tokenizer.model").string()), testing::read_file(dir.file("tok.model")));
  auto config = nlohmann::json::parse(testing::read_file((dir.path() / "hf" / "config.json").string()));
  EXPECT_EQ(config["bos_token_id"], 256);
  EXPECT_EQ(config["eos_token_id"], 257);
  EXPECT_EQ(import_hf(dir.path() / "hf").tokenizer_path, dir.path() / "hf" / "tokenizer.model");
}

// The message of the InputError `f` throws, or "" if none.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return e.what();
  }
  return "";
}

TEST(HfExport, BadInputsAreOneLineErrors) {
  TempDir dir;
  auto args = small_args();
  auto state = random_state(args);
  auto missing = state;
  missing.erase("layers.1.ffn_norm.weight");
  EXPECT_NE(error_of([&] { export_hf(missing, args, {}, dir.path() / "x"); }).find("missing parameter 'layers.1.ffn_norm.weight'"),
            std::string::npos);
  fs::create_directories(dir.path() / "occupied");
  testing::write_file(dir.file("occupied/file"), "x");
  EXPECT_NE(error_of([&] { export_hf(state, args, {}, dir.path() / "occupied"); }).find("already exists"), std::string::npos);

  HfExportOptions sharded;
  sharded.max_shard_bytes = 20000;
  export_hf(state, args, sharded, dir.path() / "hf");
  auto hf = dir.path() / "hf";
  auto index = nlohmann::json::parse(testing::read_file((hf / "model.safetensors.index.json").string()));
  auto last_shard = index["weight_map"]["lm_head.weight"].get<std::string>();
  fs::remove(hf / last_shard);
  EXPECT_NE(error_of([&] { import_hf(hf); }).find(last_shard + ", which does not exist"), std::string::npos);

  export_hf(state, args, {}, dir.path() / "hf2");
  auto config = nlohmann::json::parse(testing::read_file((dir.path() / "hf2" / "config.json").string()));
  // Another architecture's config is refused by name, not loaded as a Llama.
  auto other = config;
  other["model_type"] = "mistral";
  testing::write_file((dir.path() / "hf2" / "config.json").string(), other.dump());
  EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("model_type \"mistral\" is not one ctitan builds (known: llama, qwen3, qwen3_moe, deepseek_v3)"),
            std::string::npos);
  testing::write_file((dir.path() / "hf2" / "config.json").string(), config.dump());
  {
    // An integer-typed lm_head would be cast on load and used as weights.
    const auto weights = dir.path() / "hf2" / "model.safetensors";
    auto file = load_safetensors(weights);
    auto original = file.tensors;
    file.tensors["lm_head.weight"] = file.tensors["lm_head.weight"].to(torch::kLong);
    save_safetensors(weights, file.tensors);
    EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("tensor 'lm_head.weight' is Long, not a floating-point weight"),
              std::string::npos);
    save_safetensors(weights, original);
  }
  // 8 heads of the written head_dim need twice the query rows the tensors have.
  config["num_attention_heads"] = 8;
  testing::write_file((dir.path() / "hf2" / "config.json").string(), config.dump());
  EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("'layers.0.attention.wo.weight' has shape [32, 32], the model needs [32, 64]"),
            std::string::npos) << error_of([&] { import_hf(dir.path() / "hf2"); });
  config["head_dim"] = 3;  // RoPE rotates pairs
  testing::write_file((dir.path() / "hf2" / "config.json").string(), config.dump());
  EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("head_dim 3 do not split into even heads"),
            std::string::npos);
  config.erase("head_dim");
  config["num_attention_heads"] = 4;
  config["hidden_size"] = 48;
  testing::write_file((dir.path() / "hf2" / "config.json").string(), config.dump());
  EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("has shape"), std::string::npos);
  config.erase("hidden_size");
  testing::write_file((dir.path() / "hf2" / "config.json").string(), config.dump());
  EXPECT_NE(error_of([&] { import_hf(dir.path() / "hf2"); }).find("missing key 'hidden_size'"), std::string::npos);
}

// Issue #17: a config.json with rms_norm_eps -1 imported, and generate printed zeros with exit 0.
// Every value is checked for type and range, and the error names the file and the key.
TEST(HfConfig, RefusesNonsenseValuesNamingTheKey) {
  const auto good = hf_config_json(small_args(), torch::kFloat, std::nullopt);
  ASSERT_EQ(error_of([&] { model_args_from_hf_config(good, "m/config.json"); }), "");
  struct Case {
    std::string key;
    nlohmann::json value;
    std::string expected;  // in the message, after "m/config.json: "
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"rms_norm_eps", -1, "key 'rms_norm_eps' must be a finite number > 0 (got -1)"},
      {"rms_norm_eps", 0, "key 'rms_norm_eps' must be a finite number > 0 (got 0)"},
      {"rms_norm_eps", nan, "key 'rms_norm_eps' must be a finite number > 0"},
      {"rms_norm_eps", "1e-5", "key 'rms_norm_eps' has the wrong type"},
      {"rope_theta", -10000.0, "key 'rope_theta' must be a finite number > 0 (got -10000.0)"},
      {"rope_theta", 0, "key 'rope_theta' must be a finite number > 0 (got 0)"},
      {"rope_theta", inf, "key 'rope_theta' must be a finite number > 0"},
      {"hidden_size", 0, "key 'hidden_size' must be a positive integer"},
      {"hidden_size", 32.5, "key 'hidden_size' has the wrong type (32.5)"},
      {"num_hidden_layers", -2, "key 'num_hidden_layers' must be a positive integer"},
      {"num_hidden_layers", true, "key 'num_hidden_layers' has the wrong type (true)"},
      {"num_attention_heads", 0, "key 'num_attention_heads' must be a positive integer"},
      {"num_key_value_heads", -1, "key 'num_key_value_heads' must be a positive integer"},
      {"vocab_size", int64_t(1) << 62, "key 'vocab_size' must be a positive integer up to 2147483648"},
      {"intermediate_size", 0, "key 'intermediate_size' must be a positive integer"},
      {"max_position_embeddings", -64, "key 'max_position_embeddings' must be a positive integer"},
      {"tie_word_embeddings", "yes", "key 'tie_word_embeddings' must be true or false"},
  };
  for (const auto& c : cases) {
    auto config = good;
    config[c.key] = c.value;
    auto error = error_of([&] { model_args_from_hf_config(config, "m/config.json"); });
    EXPECT_NE(error.find("m/config.json: " + c.expected), std::string::npos)
        << c.key << " = " << c.value.dump() << ": " << error;
  }
  // transformers 5.x spells theta inside rope_parameters: checked the same way.
  auto config = good;
  config.erase("rope_theta");
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", -1}};
  EXPECT_NE(error_of([&] { model_args_from_hf_config(config, "m/config.json"); })
                .find("rope_parameters: key 'rope_theta' must be a finite number > 0"), std::string::npos);
}

TEST(HfConfig, IntermediateSizeIsTheFfnWidth) {
  ModelArgs args;
  args.family = "llama3";
  args.dim = 4096;
  for (int64_t hidden : {1, 7, 1000, 10922, 11008, 14336, 28672}) {
    args.ffn_dim = hidden;
    auto config = hf_config_json(args, torch::kFloat, std::nullopt);
    EXPECT_EQ(model_args_from_hf_config(config, "c").ffn_hidden_dim(), hidden);
  }
}

TEST(HfConfig, InfersShapesFromTensors) {
  auto args = small_args();
  auto state = random_state(args);
  ModelArgs hyper;
  hyper.n_heads = 4; hyper.norm_eps = 1e-6; hyper.rope_theta = 10000; hyper.max_seq_len = 64;
  expect_same_shape(infer_model_args(state, hyper), args);
  hyper.n_heads = 5;
  EXPECT_THROW(infer_model_args(state, hyper), InputError);
}

}  // namespace
}  // namespace ctitan::checkpoint::hf
