#pragma once
// `ctitan run`, the counterpart of torchrun: starts nproc_per_node workers on this node, hosts
// (node 0) or joins the job's TCPStore, rendezvouses with the other nodes' launchers, prefixes
// the workers' output, and stops or restarts every node's workers when one of them fails.
//
// The pieces live next to this file (launcher.cpp itself runs the rounds):
//   worker_group.h         this node's workers of one round: start, watch, stop, report
//   worker_process.h       fork/exec of one worker, its environment, its exit status
//   output_prefix.h        per-rank line splitting: console prefix, log file, last lines
//   node_rendezvous.h      the launchers' keys on the store: join a round, failure, done
//   signals.h              SIGINT/SIGTERM/SIGCHLD turned into bytes on a pollable pipe
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ctitan::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;              // workers on this node
  int nnodes = 1;                      // launchers (nodes) in the job; elastic: the most (--nnodes MIN:MAX)
  int min_nnodes = 0;                  // elastic: the fewest nodes a round may start with (0: nnodes)
  int node_rank = 0;                   // this launcher's node index; node 0 hosts the store
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;             // 0: the store picks a free port (single node only)
  int max_restarts = 0;                // extra rounds after a failure, on every node
  std::set<int> local_ranks_filter;    // local ranks whose output reaches the console; empty = all
  std::string log_dir;                 // non-empty: rank R's output also goes to log_dir/attempt_{k}/rank_{R}.log
  // torchrun's --redirects and --tee, per local rank (key -1: every rank): a mask of streams,
  // 1 = stdout, 2 = stderr. Redirected streams go to the log file only, teed ones to the console
  // and the file. With neither set, --log-dir alone tees both streams of every rank.
  std::map<int, int> redirects, tee;
  std::string rdzv_id = "none";        // the job id, as TORCHELASTIC_RUN_ID
  std::string role = "default";        // the workers' role, as ROLE_NAME
  double monitor_interval_s = 0.1;     // how often the store is polled for other nodes' state
  double rdzv_timeout_s = 300;         // how long to wait for every node to join a round
  double heartbeat_timeout_s = 30;     // a node whose launcher has not beaten for this long is lost
  double last_call_timeout_s = 30;     // elastic: once MIN nodes joined a round, how long more may join
  double term_timeout_s = 5;           // SIGTERM-to-SIGKILL grace period when stopping workers
  bool exec = false;                   // command[0] is any program, not a ctitan subcommand
  std::vector<std::string> command;    // what every worker runs (a ctitan subcommand by default)

  // --nnodes MIN:MAX with MIN < MAX: a round starts with the nodes that are there (at least MIN),
  // so a node lost for good shrinks the world instead of ending the job (torchelastic's
  // behaviour). --node-rank still names the node; node 0 hosts the store and must stay.
  bool elastic() const { return min_nnodes > 0 && min_nnodes < nnodes; }
  int fewest_nodes() const { return min_nnodes > 0 ? min_nnodes : nnodes; }
};

// Throws InputError (exit code 2) naming the flag when an option is out of range or
// inconsistent, e.g. --master-port 0 with --nnodes 2.
void validate(const LaunchOptions& options);

// Runs rounds of workers until one round succeeds on every node or the restarts are used up.
// Returns the launcher's exit code: 0 when every worker of the final round exited 0, 1 after a
// worker failure (a summary naming the rank is printed on stderr), 128+signo when the launcher
// was stopped by SIGINT/SIGTERM. Throws InputError for bad options and rendezvous timeouts.
int launch(const LaunchOptions& options);

}  // namespace ctitan::launcher
