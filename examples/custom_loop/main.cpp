// A training loop of your own on ctitan's library, without its Trainer: a small Llama, the
// packed data loader, FSDP over every rank of the job, AdamW, token-weighted loss, and sharded
// checkpoints that a second run resumes from.
//
//   ctitan run --nproc-per-node 2 --master-port 0 --exec ./custom_loop -- OUT_DIR STEPS
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "ctitan/checkpoint/manager.h"
#include "ctitan/data/packed_loader.h"
#include "ctitan/data/token_stream.h"
#include "ctitan/data/tokenizer.h"
#include "ctitan/distributed/communicator.h"
#include "ctitan/distributed/init_distributed.h"
#include "ctitan/models/model_spec.h"
#include "ctitan/parallel/fsdp_plan.h"
#include "ctitan/components/adamw.h"
#include "ctitan/components/loss.h"
#include "ctitan/train/model_builder.h"

using namespace ctitan;

namespace {

// A byte-level tokenizer (every byte a token) and a repetitive corpus: enough to see the loss fall.
std::string write_corpus(const std::filesystem::path& dir, int rank) {
  std::filesystem::create_directories(dir);
  auto path = dir / fmt::format("corpus-{}.txt", rank);
  std::ofstream out(path);
  for (int i = 0; i < 400; ++i) out << "the quick brown fox jumps over the lazy dog " << i % 7 << "\n";
  return path.string();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::cerr << "usage: custom_loop OUT_DIR STEPS (under ctitan run)\n";
    return 2;
  }
  const std::string out_dir = argv[1];
  const int64_t steps = std::stoll(argv[2]);

  config::JobConfig config;  // defaults; what this loop uses is set here
  config.job.dump_folder = out_dir;
  config.checkpoint.enable = true;
  config.checkpoint.interval = 3;
  config.checkpoint.last_save_model_only = false;  // the next run resumes optimizer and data too
  torch::manual_seed(0);

  // Joins the job ctitan run (or torchrun) started: store, device mesh, process groups.
  auto dist = distributed::init_distributed(config, distributed::read_dist_env());
  const int rank = dist->env.rank, world = dist->env.world_size;
  auto shard_group = dist->mesh->group("dp_shard");

  auto bytes = std::vector<std::string>();
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  auto tokenizer = std::make_shared<const data::Tokenizer>(data::Tokenizer::from_ranks(bytes));

  models::ModelArgs args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.vocab_size = tokenizer->vocab_size();
  args.max_seq_len = 64;
  auto model = train::build_model(args, torch::kCPU);  // every rank builds the same weights (seed 0)
  // Which modules form an FSDP unit is the family's plan, from the model registry.
  const auto plan = models::model_spec(args.family).parallelize_plan(args);
  auto fsdp = parallel::apply_fsdp(*model, plan.fsdp_units, {shard_group, nullptr}, {torch::kFloat, torch::kFloat},
                                   config::ReshardAfterForward::kDefault);
  components::AdamW optimizer(fsdp->parameters_to_optimize(), {.lr = 3e-3});

  // Window i of the packed stream goes to rank i % world: each rank reads its own share.
  data::PackedLoader loader(data::open_token_stream(write_corpus(std::filesystem::path(out_dir) / "data", rank),
                                                    "text", tokenizer, "corpus"),
                            /*seq_len=*/32, /*batch_size=*/4, "corpus", rank, world, args.vocab_size);

  // What a checkpoint saves and restores, handed to the manager once.
  struct JobState : checkpoint::Stateful {
    parallel::fsdp::FSDPModule& fsdp;
    components::AdamW& optimizer;
    data::PackedLoader& loader;
    int64_t step = 0;
    JobState(parallel::fsdp::FSDPModule& f, components::AdamW& o, data::PackedLoader& l)
        : fsdp(f), optimizer(o), loader(l) {}
    checkpoint::PartStates state_dicts() const override {
      StateDict params;
      for (const auto& [fqn, p] : fsdp.parameters_to_optimize()) params[fqn] = p;
      return {{"model", params},
              {"optimizer", optimizer.state_dict()},
              {"dataloader", loader.state_dict()},
              {"train_state", {{"step", torch::tensor(step)}}}};
    }
    checkpoint::PartLayouts shard_layouts() const override {
      auto model = fsdp.shard_layouts();
      return {{"model", model}, {"optimizer", optimizer.state_layouts(model)}};
    }
    void load_state_dicts(const checkpoint::PartStates& loaded) override {
      torch::NoGradGuard no_grad;
      for (auto& [fqn, p] : fsdp.parameters_to_optimize()) p.copy_(loaded.at("model").at(fqn));
      optimizer.load_state_dict(loaded.at("optimizer"));
      loader.load_state_dict(loaded.at("dataloader"));
      step = loaded.at("train_state").at("step").item<int64_t>();
    }
  } job(*fsdp, optimizer, loader);
  checkpoint::CheckpointManager checkpoints(config, checkpoint::store_coordinator(dist->store, rank, world),
                                            dist->world, checkpoint::RankPlace{rank, world, rank, world}, job);
  if (checkpoints.load() && rank == 0) fmt::print("custom_loop: resumed at step {}\n", job.step);
  int64_t& step = job.step;

  while (step < steps) {
    auto batch = loader.next();
    // Token-weighted mean over the global batch: every rank divides by the same total.
    auto tokens = components::count_valid_tokens(batch.labels);
    dist->world->all_reduce(tokens, distributed::ReduceOp::kSum);
    auto loss = components::summed_cross_entropy(model->forward(batch.inputs), batch.labels) / tokens.to(torch::kFloat);
    loss.backward();  // FSDP reduce-scatters each block's gradients into this rank's shards
    optimizer.step(3e-3);
    optimizer.zero_grad();
    ++step;
    auto global_loss = loss.detach().clone();
    dist->world->all_reduce(global_loss, distributed::ReduceOp::kSum);
    if (rank == 0) fmt::print("custom_loop: step {} loss {:.4f}\n", step, global_loss.item<double>());
    checkpoints.after_step(step, step == steps);
  }
  checkpoints.finish();
  return 0;
} catch (const std::exception& e) {
  std::cerr << "custom_loop: " << e.what() << "\n";
  return 1;
}
