// `ctitan run [flags] SUBCOMMAND ARGS...` or `ctitan run [flags] --exec PROG ARGS...`: the
// counterpart of torchrun. Flags take dashes or underscores (--nproc-per-node, --nproc_per_node).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "ctitan/cli/commands.h"
#include "ctitan/common/error.h"
#include "ctitan/launcher/launcher.h"

namespace ctitan::cli {
namespace {

std::set<int> parse_rank_list(const std::string& text) {
  std::set<int> ranks;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      int r = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ranks.insert(r);
    } catch (const std::exception&) {
      throw InputError(fmt::format("run: --local-ranks-filter '{}' is not a comma-separated list of ranks", text), 2);
    }
  }
  return ranks;
}

// "host:port" or "[v6addr]:port".
void parse_endpoint(const std::string& endpoint, launcher::LaunchOptions& options) {
  auto colon = endpoint.rfind(':');
  std::string host = endpoint.substr(0, colon), port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  try {
    size_t used = 0;
    options.master_port = std::stoi(port, &used);
    if (used != port.size() || host.empty()) throw std::invalid_argument(endpoint);
  } catch (const std::exception&) {
    throw InputError(fmt::format("run: --rdzv-endpoint '{}' is not HOST:PORT", endpoint), 2);
  }
  options.master_addr = host;
}

// torchrun's --tee / --redirects value: "3" for every local rank, or "0:1,1:3" per local rank;
// 0 none, 1 stdout, 2 stderr, 3 both.
std::map<int, int> parse_streams(const std::string& flag, const std::string& text) {
  auto fail = [&] {
    return InputError(fmt::format("run: {} '{}' must be 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or "
                                  "LOCAL_RANK:N,... (e.g. 0:3,1:1)", flag, text), 2);
  };
  auto stream_mask = [&](const std::string& item) {
    if (item.size() != 1 || item[0] < '0' || item[0] > '3') throw fail();
    return item[0] - '0';
  };
  std::map<int, int> out;
  if (text.find(':') == std::string::npos) {
    out[-1] = stream_mask(text);
    return out;
  }
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw fail();
    try {
      size_t used = 0;
      int rank = std::stoi(item.substr(0, colon), &used);
      if (used != colon || rank < 0) throw fail();
      out[rank] = stream_mask(item.substr(colon + 1));
    } catch (const std::logic_error&) {  // std::stoi: not a number, or out of range
      throw fail();
    }
  }
  return out;
}

// torchrun's --nnodes: "N", or "MIN:MAX" for an elastic job.
void parse_nnodes(const std::string& text, launcher::LaunchOptions& options) {
  auto number = [&](const std::string& item) {
    size_t used = 0;
    int n = std::stoi(item, &used);
    if (used != item.size()) throw std::invalid_argument(item);
    return n;
  };
  try {
    auto colon = text.find(':');
    if (colon == std::string::npos) {
      options.nnodes = number(text);
      options.min_nnodes = 0;
    } else {
      options.min_nnodes = number(text.substr(0, colon));
      options.nnodes = number(text.substr(colon + 1));
      if (options.min_nnodes < 1) throw std::invalid_argument(text);
    }
  } catch (const std::logic_error&) {
    throw InputError(fmt::format("run: --nnodes '{}' is not N or MIN:MAX (e.g. 2 or 1:4)", text), 2);
  }
}

// torchrun's --rdzv-conf "key=value,...": the keys of its c10d rendezvous that ctitan's has.
// keep_alive_interval x keep_alive_max_attempt is the heartbeat timeout, as in torchelastic.
void parse_rdzv_conf(const std::string& text, launcher::LaunchOptions& options) {
  double keep_alive_interval = 0, keep_alive_attempts = 0;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    auto eq = item.find('=');
    std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    double number = 0;
    try {
      size_t used = 0;
      number = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::logic_error&) {
      throw InputError(fmt::format("run: --rdzv-conf {}: '{}' is not a number of seconds", key, value), 2);
    }
    if (key == "join_timeout") {
      options.rdzv_timeout_s = number;
    } else if (key == "last_call_timeout") {
      options.last_call_timeout_s = number;
    } else if (key == "keep_alive_interval") {
      keep_alive_interval = number;
    } else if (key == "keep_alive_max_attempt") {
      keep_alive_attempts = number;
    } else {
      throw InputError(fmt::format("run: --rdzv-conf key '{}' is not supported (join_timeout, last_call_timeout, "
                                   "keep_alive_interval, keep_alive_max_attempt)",
                                   key),
                       2);
    }
  }
  if (keep_alive_interval > 0 || keep_alive_attempts > 0) {
    options.heartbeat_timeout_s = (keep_alive_interval > 0 ? keep_alive_interval : 5) *
                                  (keep_alive_attempts > 0 ? keep_alive_attempts : 3);
  }
}

// ctitan's launchers always meet on node 0's TCPStore, which is torchrun's c10d backend (and its
// static one, when every node is given its rank).
void check_rdzv_backend(const std::string& backend) {
  if (backend == "c10d" || backend == "static") return;
  throw InputError(fmt::format("run: --rdzv-backend {} is not supported: ctitan's launchers rendezvous on node 0's "
                               "TCPStore (c10d or static)", backend), 2);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Launch worker processes on this node, like torchrun: run [flags] train --config FILE ...");
  auto options = std::make_shared<launcher::LaunchOptions>();
  auto filter = std::make_shared<std::string>();
  auto endpoint = std::make_shared<std::string>();
  struct TorchrunFlags {
    bool standalone = false;
    std::string rdzv_backend = "c10d", tee, redirects, nnodes = "1", rdzv_conf;
  };
  auto torchrun = std::make_shared<TorchrunFlags>();
  cmd->add_option("--nproc-per-node,--nproc_per_node", options->nproc_per_node, "Workers on this node")
      ->capture_default_str();
  cmd->add_option("--nnodes", torchrun->nnodes, "Nodes (launchers) in the job: N, or MIN:MAX (elastic)")
      ->capture_default_str();
  cmd->add_option("--node-rank,--node_rank", options->node_rank, "This node's index; node 0 hosts the store")
      ->capture_default_str();
  cmd->add_option("--master-addr,--master_addr", options->master_addr, "Address of node 0")->capture_default_str();
  cmd->add_option("--master-port,--master_port", options->master_port, "Store port on node 0 (0: any free port)")
      ->capture_default_str();
  cmd->add_option("--rdzv-endpoint,--rdzv_endpoint", *endpoint, "HOST:PORT, sets --master-addr and --master-port");
  cmd->add_flag("--standalone", torchrun->standalone, "One node on localhost with a free port (--nnodes 1 --master-port 0)");
  cmd->add_option("--rdzv-backend,--rdzv_backend", torchrun->rdzv_backend, "c10d or static (both: node 0's TCPStore)")
      ->capture_default_str();
  cmd->add_option("--rdzv-id,--rdzv_id", options->rdzv_id, "Job id, given to workers as TORCHELASTIC_RUN_ID")
      ->capture_default_str();
  cmd->add_option("--role", options->role, "Worker role, given to workers as ROLE_NAME")->capture_default_str();
  cmd->add_option("--tee", torchrun->tee,
                  "Streams also written to --log-dir: 0 none, 1 stdout, 2 stderr, 3 both, or LOCAL_RANK:N,...");
  cmd->add_option("--redirects", torchrun->redirects,
                  "Streams written to --log-dir instead of the console: same values as --tee");
  cmd->add_option("--max-restarts,--max_restarts", options->max_restarts, "Restarts of all workers after a failure")
      ->capture_default_str();
  cmd->add_option("--local-ranks-filter,--local_ranks_filter", *filter,
                  "Comma-separated local ranks whose output is shown (default: all)");
  cmd->add_option("--log-dir,--log_dir", options->log_dir, "Also write rank R's output to DIR/attempt_K/rank_R.log");
  cmd->add_option("--monitor-interval,--monitor_interval", options->monitor_interval_s,
                  "Seconds between polls of the other nodes' state")
      ->capture_default_str();
  cmd->add_option("--rdzv-timeout,--rdzv_timeout", options->rdzv_timeout_s,
                  "Seconds to wait for every node to join a round")
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout,--heartbeat_timeout", options->heartbeat_timeout_s,
                  "Seconds without a heartbeat after which another node's launcher is taken for lost")
      ->capture_default_str();
  cmd->add_option("--rdzv-conf,--rdzv_conf", torchrun->rdzv_conf,
                  "torchrun's rendezvous settings: join_timeout, last_call_timeout, keep_alive_interval, "
                  "keep_alive_max_attempt (KEY=SECONDS,...)");
  cmd->add_option("--term-timeout,--term_timeout", options->term_timeout_s,
                  "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  cmd->add_flag("--exec,--no-python,--no_python", options->exec,
                "Run PROG ARGS... instead of a ctitan subcommand");
  // Everything from the first positional on (the subcommand or program) belongs to the workers.
  cmd->prefix_command();
  cmd->callback([cmd, options, filter, endpoint, torchrun] {
    options->command = cmd->remaining();
    if (!options->command.empty() && options->command.front() == "--") options->command.erase(options->command.begin());
    parse_nnodes(torchrun->nnodes, *options);
    if (!torchrun->rdzv_conf.empty()) parse_rdzv_conf(torchrun->rdzv_conf, *options);
    if (!filter->empty()) options->local_ranks_filter = parse_rank_list(*filter);
    if (!endpoint->empty()) parse_endpoint(*endpoint, *options);
    check_rdzv_backend(torchrun->rdzv_backend);
    if (torchrun->standalone) {
      if (options->nnodes != 1 || options->min_nnodes > 1) {
        throw InputError("run: --standalone runs one node; drop --nnodes", 2);
      }
      options->master_addr = "127.0.0.1";
      options->master_port = 0;
    }
    if (!torchrun->tee.empty()) options->tee = parse_streams("--tee", torchrun->tee);
    if (!torchrun->redirects.empty()) options->redirects = parse_streams("--redirects", torchrun->redirects);
    int code = launcher::launch(*options);
    // A worker failure is not an exception: the launcher has printed its summary, and its exit
    // code (1, or 128+signal) is the whole answer.
    if (code != 0) throw ExitStatus(code);
  });
}

}  // namespace ctitan::cli
