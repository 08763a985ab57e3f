// `ctitan checkpoint <subcommand>`: tools on saved checkpoints. Add a subcommand by writing an
// add_checkpoint_X(CLI::App&) in its own file and calling it here.
#include "ctitan/cli/commands.h"

namespace ctitan::cli {

void add_checkpoint_command(CLI::App& app) {
  auto* group = app.add_subcommand("checkpoint", "Inspect and convert checkpoints");
  group->require_subcommand(1);
  add_checkpoint_inspect(*group);
}

}  // namespace ctitan::cli
