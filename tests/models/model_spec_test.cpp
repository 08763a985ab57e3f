// The model registry: lookups and their errors, and the rule that keeps families out of the rest
// of the tree (issue #30): outside src/ctitan/models/ no file includes a family's folder or
// names its namespace; everything reaches a family through models/model_spec.h.
#include "ctitan/models/model_spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "ctitan/common/error.h"
#include "ctitan/models/common/transformer.h"

namespace ctitan::models {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSpec, RegistryListsTheFamiliesAndNamesWhatIsUnknown) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"llama3", "qwen3", "qwen3_moe", "deepseek_v3"}));
  EXPECT_EQ(default_model_name(), "llama3");
  EXPECT_EQ(model_spec("qwen3").hf.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(model_spec_for_hf_type("llama")->name, "llama3");
  EXPECT_EQ(model_spec_for_hf_type("mistral"), nullptr);
  EXPECT_NE(error_of([] { model_spec("gpt2"); }).find("model.name 'gpt2' is unknown (known: llama3, qwen3, qwen3_moe, deepseek_v3)"),
            std::string::npos);
  EXPECT_NE(error_of([] { model_flavor("qwen3", "405B"); }).find("model.flavor '405B' is unknown for qwen3 (known: debugmodel, 0.6B"),
            std::string::npos);
  for (const auto& name : model_names()) {
    for (const auto& flavor : flavor_names(name)) EXPECT_EQ(model_flavor(name, flavor).family, name);
  }
}

// Each family's TP plan names modules its model has: every sublayer the block has (a MoE layer
// has no feed_forward) with each projection a Linear of it; and together the plan covers every
// weight of a block, dense or MoE, standard or latent attention, so none is left unsharded and
// unsummed by mistake.
TEST(ModelSpec, EveryFamilysTpPlanCoversItsBlocks) {
  for (const auto& spec : model_specs()) {
    for (const auto& [flavor, args] : spec.flavors) {
      if (flavor != "debugmodel" && flavor != "0.6B") continue;  // small enough to build
      auto small = args;  // the flavor's features (QK-norm, tying, head width), few weights
      small.n_layers = 2;  // DeepSeek-V3's first layer is dense, its second MoE
      small.vocab_size = 256;
      Transformer model(small);
      const auto plan = spec.parallelize_plan(small).tp;
      for (auto* block : model->blocks()) {
      auto params = block->named_parameters();
      const auto children = block->named_children();
      std::set<std::string> covered;
      for (const auto& sub : plan.sublayers) {
        if (!children.contains(sub.module)) continue;
        std::vector<std::string> names = sub.column_wise;
        names.push_back(sub.row_wise);
        for (const auto& name : names) {
          const auto fqn = sub.module + "." + name + ".weight";
          EXPECT_TRUE(params.contains(fqn)) << spec.name << " " << flavor << ": " << fqn;
          covered.insert(fqn);
        }
      }
      for (const auto& name : plan.replicated) {
        if (params.contains(name)) covered.insert(name);
      }
      EXPECT_EQ(covered.size(), params.size()) << spec.name << " " << flavor << " layer " << block->layer_id;
      }
    }
  }
}

TEST(ModelSpec, NoFileOutsideModelsNamesAFamily) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(CTITAN_SOURCE_DIR) / "src" / "ctitan";
  ASSERT_TRUE(fs::is_directory(src / "models"));
  std::vector<std::regex> forbidden;
  for (const auto& name : model_names()) {
    forbidden.emplace_back("models/" + name + "/");
    forbidden.emplace_back("models::" + name + "::");
  }
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const auto rel = fs::relative(entry.path(), src).string();
    if (rel.rfind("models/", 0) == 0) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const auto content = text.str();
    for (const auto& re : forbidden) EXPECT_FALSE(std::regex_search(content, re)) << "src/ctitan/" << rel << " names a family";
    ++checked;
  }
  EXPECT_GT(checked, 100);  // the walk saw the tree
}

}  // namespace
}  // namespace ctitan::models
