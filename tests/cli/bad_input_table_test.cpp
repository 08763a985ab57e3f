// Issue #17 part 6, "Bad input, counted": one table of bad inputs of every kind ctitan reads
// (configs, command-line overrides, datasets, tokenizers, checkpoints, Hugging Face files, the
// launcher's flags and its rendezvous), each run through the binary as a user runs it.
//
// Every case must end the same way (docs/RELIABILITY.md, "The promise"; STYLE.md §7):
//   - the process exits by itself (not killed by a signal, no core dump) within kTimeoutSeconds;
//   - with the stated exit code: 2 for config and usage errors, 1 for other bad input (an
//     InputError) and for a rendezvous that cannot happen;
//   - its stderr is exactly one line, "ctitan: ...", naming the file, key, flag or rank, without
//     a backtrace, c10d/glog lines, "internal error" or "terminate called";
//   - for checkpoint cases, the earlier good checkpoint beside the damaged one keeps its bytes.
// The good inputs (a trained checkpoint with steps 2 and 4, its HF export, a tokenizer) are made
// once per suite; each case copies and damages what it needs in a directory of its own.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "ctitan/metrics/memory_tracker.h"
#include "support/test_support.h"
#include "support/tiny_job.h"

namespace ctitan {
namespace {

namespace fs = std::filesystem;
using Args = std::vector<std::string>;
using Env = std::vector<std::pair<std::string, std::string>>;
using testing::concat;
using testing::flip_byte;
using testing::read_file;
using testing::write_file;

// Generous: every case ends in about a second; the limit only turns a hang into a failure.
constexpr int kTimeoutSeconds = 60;

// One ctitan process of a case: its arguments and the variables added to its environment.
struct Process {
  Args args;
  Env env = {};
};

struct Outcome {
  int exit_code = -1;
  int signal = 0;  // the signal that killed it, 0 if it exited
  bool timed_out = false;
  std::string out, err;
};

// Starts every process at once (ranks of one job meet each other), with stdout and stderr in
// files of their own, and waits for all; a process still running at the deadline is killed with
// its process group and reported as timed out.
std::vector<Outcome> run_together(const std::vector<Process>& processes, const fs::path& dir) {
  struct Child {
    pid_t pid;
    std::string out, err;
    bool done = false;
    int status = 0;
  };
  std::vector<Child> children;
  for (size_t i = 0; i < processes.size(); ++i) {
    Child c{0, (dir / ("stdout-" + std::to_string(i))).string(), (dir / ("stderr-" + std::to_string(i))).string()};
    int out = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = ::open(c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    c.pid = fork();
    if (c.pid == 0) {
      setpgid(0, 0);
      dup2(out, 1);
      dup2(err, 2);
      int null = ::open("/dev/null", O_RDONLY);
      dup2(null, 0);
      for (const auto& [k, v] : processes[i].env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(CTITAN_BIN)};
      for (const auto& a : processes[i].args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(CTITAN_BIN, argv.data());
      _exit(127);
    }
    ::close(out);
    ::close(err);
    children.push_back(c);
  }
  std::vector<Outcome> outcomes(children.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTimeoutSeconds);
  for (size_t left = children.size(); left > 0;) {
    for (size_t i = 0; i < children.size(); ++i) {
      auto& c = children[i];
      if (c.done || waitpid(c.pid, &c.status, WNOHANG) == 0) continue;
      c.done = true;
      --left;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < children.size(); ++i) {
        auto& c = children[i];
        if (c.done) continue;
        kill(-c.pid, SIGKILL);
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &c.status, 0);
        c.done = true;
        outcomes[i].timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < children.size(); ++i) {
    auto& c = children[i];
    auto& o = outcomes[i];
    if (WIFEXITED(c.status)) o.exit_code = WEXITSTATUS(c.status);
    if (WIFSIGNALED(c.status)) o.signal = WTERMSIG(c.status);
    o.out = read_file(c.out);
    o.err = read_file(c.err);
  }
  return outcomes;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    files[fs::relative(e.path(), dir).string()] = e.is_regular_file() ? read_file(e.path().string()) : "<dir>";
  }
  return files;
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// A TCP port nothing listens on now (the kernel's pick, released at once).
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Sockets a case holds open while it runs (a port in use), closed after the case.
std::vector<int> g_held_sockets;

// A port held by a listening socket on every address of this host until the case ends.
int port_in_use() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  int no = 0;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  listen(fd, 4);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  g_held_sockets.push_back(fd);
  return ntohs(a.sin6_port);
}

// A safetensors file: 8-byte little-endian header length, JSON header, tensor bytes.
struct Safetensors {
  nlohmann::json header;
  std::string data;
};

Safetensors read_safetensors(const std::string& path) {
  auto bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

std::string length_prefix(uint64_t n) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return len;
}

void write_safetensors(const std::string& path, const Safetensors& s) {
  std::string header = s.header.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  write_file(path, length_prefix(header.size()) + header + s.data);
}

// The tensor names of a safetensors header, in offset order.
std::vector<std::string> tensors_by_offset(const nlohmann::json& header) {
  std::vector<std::string> names;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") names.push_back(name);
  }
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return header[a]["data_offsets"][0].get<uint64_t>() < header[b]["data_offsets"][0].get<uint64_t>();
  });
  return names;
}

// A ctitan token file ("CTTOKS01", vocab, reserved, uint32 ids) from raw parts.
std::string token_file_bytes(uint32_t vocab, const std::vector<uint32_t>& ids, const std::string& magic = "CTTOKS01") {
  std::string bytes = magic;
  auto u32 = [&bytes](uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(char((v >> (8 * i)) & 0xff));
  };
  u32(vocab);
  u32(0);
  for (auto id : ids) u32(id);
  return bytes;
}

std::vector<uint32_t> cycle(size_t n, uint32_t period) {
  std::vector<uint32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = uint32_t(i % period);
  return ids;
}

struct Case {
  std::string kind;    // the table's category
  std::string name;    // what is wrong
  int exit_code;       // expected of every process of the case
  Args needles;        // each must appear in every process's error line; "{dir}" is the case's directory
  std::function<std::vector<Process>(const fs::path& dir)> setup;
  bool checkpoint = false;  // dir/checkpoint holds the good step-2 beside a damaged step-4
};

class CliBadInput : public ::testing::Test {
 protected:
  // One trained job (checkpoints at steps 2 and 4, full), its HF export and a tokenizer.
  static void SetUpTestSuite() {
    root_ = new testing::TempDir();
    const auto job = root_->path() / "job";
    auto trained = testing::run_ctitan(concat(concat({"train"}, testing::tiny_job_args(job.string())),
        {"--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval", "2",
         "--checkpoint.last_save_model_only", "false", "--checkpoint.keep_latest_k", "0"}));
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    ASSERT_TRUE(fs::exists(job / "checkpoint" / "step-2" / "metadata.json")) << trained.output;
    ASSERT_TRUE(fs::exists(job / "checkpoint" / "step-4" / "metadata.json")) << trained.output;
    auto exported = testing::run_ctitan({"checkpoint", "export", "--input", (job / "checkpoint" / "step-4").string(),
                                         "--output", (root_->path() / "hf").string()});
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    write_file(root_->file("corpus.txt"), testing::generated_corpus(200, 30));
    auto tok = testing::run_ctitan({"tokenizer", "train", "--input", root_->file("corpus.txt"), "--vocab-size", "300",
                                    "--output", root_->file("tok.model")});
    ASSERT_EQ(tok.exit_code, 0) << tok.output;
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }

  static fs::path checkpoints() { return root_->path() / "job" / "checkpoint"; }
  static fs::path hf() { return root_->path() / "hf"; }
  static std::string tokenizer() { return root_->file("tok.model"); }

  static testing::TempDir* root_;
};

testing::TempDir* CliBadInput::root_ = nullptr;

// ---- the cases' building blocks ------------------------------------------------------------

// `ctitan train` of the tiny job in `dir`, plus `extra`.
Process train(const fs::path& dir, const Args& extra = {}) {
  return {concat(concat({"train"}, testing::tiny_job_args(dir.string())), concat({"--training.steps", "2"}, extra))};
}

// A train whose config file holds `toml`.
std::function<std::vector<Process>(const fs::path&)> config_file(const std::string& toml) {
  return [toml](const fs::path& dir) {
    write_file((dir / "job.toml").string(), toml);
    return std::vector<Process>{train(dir, {"--config", (dir / "job.toml").string()})};
  };
}

std::function<std::vector<Process>(const fs::path&)> overrides(const Args& extra) {
  return [extra](const fs::path& dir) { return std::vector<Process>{train(dir, extra)}; };
}

// A train on the dataset `make` writes into dir (returning its path).
std::function<std::vector<Process>(const fs::path&)> dataset(std::function<std::string(const fs::path&)> make,
                                                             const Args& extra = {}) {
  return [make, extra](const fs::path& dir) {
    return std::vector<Process>{train(dir, concat({"--training.dataset_path", make(dir)}, extra))};
  };
}

// The checkpoint cases: dir/checkpoint holds a copy of the suite's steps 2 and 4, `damage`
// applied to step-4; `command` is run with dir and the damaged step directory.
std::function<std::vector<Process>(const fs::path&)> damaged_checkpoint(
    fs::path source, std::function<void(const fs::path& step)> damage,
    std::function<Process(const fs::path& dir, const fs::path& step)> command) {
  return [=](const fs::path& dir) {
    fs::copy(source, dir / "checkpoint", fs::copy_options::recursive);
    damage(dir / "checkpoint" / "step-4");
    return std::vector<Process>{command(dir, dir / "checkpoint" / "step-4")};
  };
}

// Resuming the damaged step-4 by name (without load_step the run falls back to step-2, as
// CliCheckpoint.CorruptCheckpointFallsBackToThePreviousOne shows).
Process resume_step4(const fs::path& dir, const fs::path&, const Args& extra = {}) {
  return train(dir, concat({"--training.steps", "6", "--checkpoint.enable", "true", "--checkpoint.interval", "100",
                            "--checkpoint.load_step", "4"}, extra));
}

// Where the model tensor `key` starts in step/rank-00000.bin.
size_t tensor_offset(const fs::path& step, const std::string& key) {
  auto j = nlohmann::json::parse(read_file((step / "metadata.json").string()));
  for (const auto& e : j["entries"]) {
    if (e["part"] == "model" && e["key"] == key) return e["offset"].get<size_t>();
  }
  ADD_FAILURE() << "no model tensor " << key << " in " << step;
  return 0;
}

void truncate_half(const fs::path& file) { fs::resize_file(file, fs::file_size(file) / 2); }

// Export and generate read the model's tensors only (the optimizer's state follows them in the
// shard, so cutting the file in half leaves the model whole): cut inside the first of them.
void truncate_in_model(const fs::path& step) {
  fs::resize_file(step / "rank-00000.bin", tensor_offset(step, "tok_embeddings.weight") + 100);
}

// The HF cases: dir/hf is a copy of the suite's export with `damage` applied; then `command`.
std::function<std::vector<Process>(const fs::path&)> damaged_hf(
    fs::path source, std::function<void(const fs::path& hf)> damage, const std::string& command = "import") {
  return [=](const fs::path& dir) {
    fs::copy(source, dir / "hf", fs::copy_options::recursive);
    damage(dir / "hf");
    if (command.rfind("generate", 0) == 0) {  // "generate" or "generate N": N new tokens (default 2)
      auto n = command == "generate" ? std::string("2") : command.substr(9);
      return std::vector<Process>{{{"generate", "--checkpoint", (dir / "hf").string(), "--prompt-ids", "1,2",
                                    "--max-new-tokens", n}}};
    }
    return std::vector<Process>{{{"checkpoint", "import", "--input", (dir / "hf").string(), "--output",
                                  (dir / "out").string()}}};
  };
}

// Edits the HF export's safetensors header.
std::function<void(const fs::path&)> edit_header(std::function<void(Safetensors&)> edit) {
  return [edit](const fs::path& hf) {
    auto path = (hf / "model.safetensors").string();
    auto s = read_safetensors(path);
    edit(s);
    write_safetensors(path, s);
  };
}

std::function<void(const fs::path&)> edit_config_json(std::function<void(nlohmann::json&)> edit) {
  return [edit](const fs::path& hf) {
    auto path = (hf / "config.json").string();
    auto j = nlohmann::json::parse(read_file(path));
    edit(j);
    write_file(path, j.dump());
  };
}

std::function<std::vector<Process>(const fs::path&)> tokenizer_file(const std::string& name, const std::string& bytes,
                                                                    bool by_train = false) {
  return [=](const fs::path& dir) {
    auto path = dir / name;
    fs::create_directories(path.parent_path());
    write_file(path.string(), bytes);
    if (by_train) return std::vector<Process>{train(dir, {"--model.tokenizer_path", path.string()})};
    return std::vector<Process>{{{"tokenizer", "encode", "--tokenizer", path.string(), "--text", "hello"}}};
  };
}

// A byte-level BPE tokenizer.json of the shape Llama 3 ships, with `edit` applied.
std::string tokenizer_json(std::function<void(nlohmann::json&)> edit) {
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", nlohmann::json::array()}}}};
  edit(j);
  return j.dump();
}

// `ctitan train` ranks 0..n-1 of one job without a launcher, as torchrun would start them:
// rank 0 hosts the store at MASTER_ADDR:MASTER_PORT. `extra(r)` is rank r's own arguments.
std::vector<Process> ranks(const fs::path& dir, int n, const std::string& addr, int port,
                           std::function<Args(int)> extra, std::function<std::string(int)> world_size = nullptr) {
  std::vector<Process> processes;
  for (int r = 0; r < n; ++r) {
    auto p = train(dir / "job", concat({"--comm.init_timeout_seconds", "20"}, extra(r)));
    p.env = {{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", world_size ? world_size(r) : std::to_string(n)},
             {"LOCAL_WORLD_SIZE", std::to_string(n)}, {"MASTER_ADDR", addr}, {"MASTER_PORT", std::to_string(port)}};
    processes.push_back(p);
  }
  return processes;
}

std::vector<Process> launcher(const Args& flags) {
  return {{concat(concat({"run"}, flags), {"--exec", "/bin/true"})}};
}

constexpr const char* kNoSuchHost = "no-such-host.invalid";  // RFC 6761: never resolves

std::vector<Case> bad_input_table(const fs::path& checkpoints, const fs::path& hf, const std::string& tok) {
  using P = std::vector<Process>;
  std::vector<Case> t;
  // ---- configs: a TOML file passed with --config ----
  auto file = std::string("{dir}/job.toml");
  t.push_back({"config", "TOML syntax: unclosed table header", 2, {file}, config_file("[training\nsteps = 3\n")});
  t.push_back({"config", "TOML syntax: unterminated string", 2, {file}, config_file("[job]\ndescription = \"abc\n")});
  t.push_back({"config", "TOML syntax: key defined twice", 2, {file},
               config_file("[training]\nmax_norm = 1.0\nmax_norm = 2.0\n")});
  t.push_back({"config", "TOML syntax: integer too large for 64 bits", 2, {file},
               config_file("[training]\nhousekeeping_freq = 99999999999999999999\n")});
  t.push_back({"config", "not UTF-8", 2, {file}, config_file("[job]\ndescription = \"\xff\xfe\"\n")});
  t.push_back({"config", "binary bytes", 2, {file}, config_file(std::string("\x00\x01\x02\xff\x7fTOML", 9))});
  t.push_back({"config", "unknown section", 2, {"trainnig"}, config_file("[trainnig]\nmax_norm = 1.0\n")});
  t.push_back({"config", "unknown key", 2, {"training.batchsize"}, config_file("[training]\nbatchsize = 4\n")});
  t.push_back({"config", "a section given as a value", 2, {"training"}, config_file("training = 3\n")});
  t.push_back({"config", "string for an integer", 2, {"training.housekeeping_freq"},
               config_file("[training]\nhousekeeping_freq = \"often\"\n")});
  t.push_back({"config", "string for a float", 2, {"training.max_norm"}, config_file("[training]\nmax_norm = \"big\"\n")});
  t.push_back({"config", "integer for a boolean", 2, {"debug.deterministic"}, config_file("[debug]\ndeterministic = 1\n")});
  t.push_back({"config", "array for a string", 2, {"job.description"}, config_file("[job]\ndescription = [1, 2]\n")});
  t.push_back({"config", "unknown enum value", 2, {"training.dataset"}, config_file("[training]\ndataset = \"csv\"\n")});
  t.push_back({"config", "fraction above 1", 2, {"lr_scheduler.decay_ratio"},
               config_file("[lr_scheduler]\ndecay_ratio = 1.5\n")});
  t.push_back({"config", "zero out of range", 2, {"checkpoint.interval"}, config_file("[checkpoint]\ninterval = 0\n")});
  t.push_back({"config", "non-finite: nan", 2, {"optimizer.weight_decay"},
               config_file("[optimizer]\nweight_decay = nan\n")});
  t.push_back({"config", "non-finite: inf", 2, {"optimizer.eps"}, config_file("[optimizer]\neps = inf\n")});
  t.push_back({"config", "non-finite: -inf", 2, {"lr_scheduler.min_lr_factor"},
               config_file("[lr_scheduler]\nmin_lr_factor = -inf\n")});
  // ---- command-line overrides ----
  t.push_back({"override", "unknown key (a typo)", 2, {"training.stepz"}, overrides({"--training.stepz", "3"})});
  t.push_back({"override", "unknown section", 2, {"nosuch.key"}, overrides({"--nosuch.key", "1"})});
  t.push_back({"override", "not an integer", 2, {"training.steps"}, overrides({"--training.steps", "abc"})});
  t.push_back({"override", "a fraction for an integer", 2, {"training.seq_len"}, overrides({"--training.seq_len", "1.5"})});
  t.push_back({"override", "no value", 2, {"training.max_norm"}, overrides({"--training.max_norm"})});
  t.push_back({"override", "integer beyond 64 bits", 2, {"training.local_batch_size"},
               overrides({"--training.local_batch_size", "99999999999999999999"})});
  t.push_back({"override", "not a boolean", 2, {"debug.deterministic"}, overrides({"--debug.deterministic", "maybe"})});
  t.push_back({"override", "negative steps", 2, {"training.steps"}, overrides({"--training.steps", "-1"})});
  t.push_back({"override", "context parallel degree 0", 2, {"parallelism.context_parallel_degree"},
               overrides({"--parallelism.context_parallel_degree", "0"})});
  t.push_back({"override", "sequence not cut into 2 x cp chunks", 2,
               {"training.seq_len", "parallelism.context_parallel_degree"},
               overrides({"--parallelism.context_parallel_degree", "3", "--training.seq_len", "32"})});
  t.push_back({"override", "cp rank's tokens not divisible by tp", 2,
               {"training.seq_len", "parallelism.tensor_parallel_degree"},
               overrides({"--parallelism.context_parallel_degree", "2", "--parallelism.tensor_parallel_degree", "3",
                          "--training.seq_len", "20"})});
  const std::vector<std::string> moe = {"--model.name", "qwen3_moe", "--model.head_dim", "16", "--model.moe_hidden_dim", "16"};
  t.push_back({"override", "MoE top_k above the experts", 2, {"model.top_k", "model.num_experts"},
               overrides(concat(moe, {"--model.top_k", "9"}))});
  // Experts not divisible by the EP degree needs ranks to reach: CliMoe.ExpertsNotDivisibleByTheEpDegree...
  t.push_back({"override", "EP degree not dividing dp_shard", 2, {"parallelism.expert_parallel_degree"},
               overrides(concat(moe, {"--parallelism.expert_parallel_degree", "2"}))});
  t.push_back({"override", "MoE key on a dense model", 2, {"model.num_experts"}, overrides({"--model.num_experts", "4"})});
  t.push_back({"override", "negative model dim", 2, {"model.dim"}, overrides({"--model.dim", "-8"})});
  t.push_back({"override", "heads do not divide dim", 2, {"model.n_heads"}, overrides({"--model.n_heads", "5"})});
  t.push_back({"override", "non-finite lr: nan", 2, {"optimizer.lr"}, overrides({"--optimizer.lr", "nan"})});
  t.push_back({"override", "non-finite lr: 1e999", 2, {"optimizer.lr"}, overrides({"--optimizer.lr", "1e999"})});
  t.push_back({"override", "batch not a multiple", 2, {"training.global_batch_size"},
               overrides({"--training.global_batch_size", "6"})});
  t.push_back({"override", "not UTF-8", 2, {"training.dataset_path"}, overrides({"--training.dataset_path", "a\xff"})});
  t.push_back({"override", "--config is a directory", 2, {"--config", "{dir}"},
               [](const fs::path& dir) { return P{train(dir, {"--config", dir.string()})}; }});
  // ---- sizes: each key has a range, and what is in range but cannot fit is refused before
  // anything is allocated (estimate/memory_floor.h) ----
  const std::string debug_toml = testing::source_dir() + "/configs/llama3_debug.toml";
  t.push_back({"sizes", "n_layers 10^8", 2, {"model.n_layers"}, overrides({"--model.n_layers", "100000000"})});
  t.push_back({"sizes", "seq_len near 2^62", 2, {"training.seq_len"},
               overrides({"--training.seq_len", "4611686018427387904"})});
  t.push_back({"sizes", "vocab_size near 2^62", 2, {"model.vocab_size"},
               overrides({"--model.vocab_size", "4611686018427387904"})});
  t.push_back({"sizes", "local_batch_size near 2^62", 2, {"training.local_batch_size"},
               overrides({"--training.local_batch_size", "4611686018427387904"})});
  t.push_back({"sizes", "global_batch_size near 2^63", 2, {"training.global_batch_size"},
               overrides({"--training.global_batch_size", "9223372036854775804"})});
  t.push_back({"sizes", "2^38 microbatches per step", 2, {"training.global_batch_size", "microbatches"},
               overrides({"--training.global_batch_size", "1099511627776"})});
  t.push_back({"sizes", "init timeout of 2^63 s", 2, {"comm.init_timeout_seconds"},
               overrides({"--comm.init_timeout_seconds", "9223372036854775807"})});
  t.push_back({"sizes", "in range, but 5e13 parameters", 2, {"parameters", "lower the model's sizes"},
               overrides({"--model.dim", "65536", "--model.n_layers", "1024"})});
  t.push_back({"sizes", "generate: --max-new-tokens 2^63 - 1", 1, {"--max-new-tokens", "max_seq_len"},
               [hf](const fs::path&) {
                 return P{{{"generate", "--checkpoint", hf.string(), "--prompt-ids", "1,2", "--max-new-tokens",
                            "9223372036854775807"}}};
               }});
  // max_position_embeddings at its bound, 2^31: 2.1 TiB of cache for this 2-layer model (keys and
  // values 2 x 2 layers x 2^31 x 64 x 4 B, RoPE 2^31 x 16 x 4 B), beyond the memory of any machine
  // this suite runs on; a host with 2 TiB or more leaves the row out rather than decode 2^31
  // tokens (generate_test.cpp checks the comparison against a figure the test sets, anywhere).
  if (metrics::physical_memory_bytes() < (int64_t(2) << 40)) {
    t.push_back({"sizes", "generate: a KV cache of 2^31 positions", 1, {"KV cache", "--max-new-tokens", "GiB"},
                 damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j["max_position_embeddings"] = 2147483648; }),
                            "generate 2147483646")});
  }
  t.push_back({"sizes", "estimate: --seq-len 2^63 - 1", 2, {"training.seq_len"}, [debug_toml](const fs::path&) {
                 return P{{{"estimate", "--config", debug_toml, "--seq-len", "9223372036854775807"}}};
               }});
  t.push_back({"sizes", "estimate: 2^48 ranks", 2, {"2^24 ranks"}, [debug_toml](const fs::path&) {
                 return P{{{"estimate", "--config", debug_toml, "--tp", "16777216", "--pp", "16777216"}}};
               }});
  t.push_back({"sizes", "estimate: each size in range, 2^61 bytes unsharded", 2, {"1 EiB"}, [debug_toml](const fs::path&) {
                 return P{{{"estimate", "--config", debug_toml, "--seq-len", "16777216", "--local-batch-size",
                            "16777216"}}};
               }});
  t.push_back({"sizes", "training.steps 2^62", 2, {"training.steps", "2^40"},
               overrides({"--training.steps", "4611686018427387904"})});
  t.push_back({"sizes", "checkpoint.interval 2^63 - 1", 2, {"checkpoint.interval", "2^40"},
               overrides({"--checkpoint.interval", "9223372036854775807"})});
  t.push_back({"sizes", "ps.batch_size -2^63", 2, {"ps.batch_size"},
               overrides({"--ps.batch_size", "-9223372036854775808"})});
  // ---- outputs: never an input, never a device, never an existing file without --overwrite ----
  t.push_back({"outputs", "checkpoint.folder inside a regular file, refused before step 1", 1,
               {"checkpoint.folder", "is not writable"}, [](const fs::path& dir) {
                 write_file((dir / "a_file").string(), "keep me");
                 return P{train(dir, {"--checkpoint.enable", "true", "--checkpoint.folder",
                                      (dir / "a_file" / "checkpoint").string()})};
               }});
  const auto corpus = [](const fs::path& dir) {
    write_file((dir / "corpus.txt").string(), "the cat sat on the mat\n%\nthe dog ran\n");
    return (dir / "corpus.txt").string();
  };
  t.push_back({"outputs", "data prepare onto its own --input", 1, {"--output", "is also an input"},
               [corpus, tok](const fs::path& dir) {
                 const auto input = corpus(dir);
                 return P{{{"data", "prepare", "--input", input, "--tokenizer", tok, "--output", input, "--overwrite"}}};
               }});
  t.push_back({"outputs", "data prepare onto the tokenizer", 1, {"--output", "is also an input"},
               [corpus, tok](const fs::path& dir) {
                 fs::copy_file(tok, dir / "tok.model");
                 return P{{{"data", "prepare", "--input", corpus(dir), "--tokenizer", (dir / "tok.model").string(),
                            "--output", (dir / "tok.model").string(), "--overwrite"}}};
               }});
  t.push_back({"sizes", "data prepare --workers 100000", 1, {"--workers", "1 to 1024"},
               [corpus, tok](const fs::path& dir) {
                 return P{{{"data", "prepare", "--input", corpus(dir), "--tokenizer", tok, "--output",
                            (dir / "out.bin").string(), "--workers", "100000"}}};
               }});
  t.push_back({"outputs", "data prepare onto /dev/full", 1, {"/dev/full", "not a regular file"},
               [corpus, tok](const fs::path& dir) {
                 return P{{{"data", "prepare", "--input", corpus(dir), "--tokenizer", tok, "--output", "/dev/full",
                            "--overwrite"}}};
               }});
  t.push_back({"outputs", "data prepare onto an existing file", 1, {"{dir}/out.bin", "--overwrite"},
               [corpus, tok](const fs::path& dir) {
                 write_file((dir / "out.bin").string(), "keep me");
                 return P{{{"data", "prepare", "--input", corpus(dir), "--tokenizer", tok, "--output",
                            (dir / "out.bin").string()}}};
               }});
  t.push_back({"outputs", "tokenizer train onto an existing file", 1, {"{dir}/tok.model", "--overwrite"},
               [corpus](const fs::path& dir) {
                 write_file((dir / "tok.model").string(), "keep me");
                 return P{{{"tokenizer", "train", "--input", corpus(dir), "--vocab-size", "300", "--output",
                            (dir / "tok.model").string()}}};
               }});
  t.push_back({"outputs", "tokenizer convert into a folder with a tokenizer.json", 1,
               {"{dir}/hf_tok/tokenizer.json", "--overwrite"}, [tok](const fs::path& dir) {
                 fs::create_directories(dir / "hf_tok");
                 write_file((dir / "hf_tok" / "tokenizer.json").string(), "{}");
                 return P{{{"tokenizer", "convert", "--tokenizer", tok, "--output-dir", (dir / "hf_tok").string()}}};
               }});
  t.push_back({"outputs", "tokenizer convert onto the tokenizer's own folder", 1, {"is also an input"},
               [tok](const fs::path& dir) {
                 fs::create_directories(dir / "t");
                 fs::copy_file(tok, dir / "t" / "tokenizer.model");
                 return P{{{"tokenizer", "convert", "--tokenizer", (dir / "t").string(), "--output-dir",
                            (dir / "t").string(), "--overwrite"}}};
               }});
  t.push_back({"outputs", "report onto an existing file", 1, {"{dir}/report.html", "--overwrite"},
               [checkpoints](const fs::path& dir) {
                 write_file((dir / "report.html").string(), "keep me");
                 return P{{{"report", checkpoints.parent_path().string(), "--output", (dir / "report.html").string()}}};
               }});
  t.push_back({"outputs", "checkpoint import onto its own --input", 1, {"is, or holds, the --input"},
               [hf](const fs::path& dir) {
                 fs::copy(hf, dir / "hf", fs::copy_options::recursive);
                 return P{{{"checkpoint", "import", "--input", (dir / "hf").string(), "--output", (dir / "hf").string(),
                            "--overwrite"}}};
               }});
  // ---- datasets ----
  t.push_back({"dataset", "missing", 1, {"{dir}/none.bin"}, dataset([](const fs::path& d) { return (d / "none.bin").string(); })});
  t.push_back({"dataset", "a directory with no data", 1, {"{dir}/empty_dir"}, dataset([](const fs::path& d) {
                 fs::create_directories(d / "empty_dir");
                 return (d / "empty_dir").string();
               })});
  t.push_back({"dataset", "empty file", 1, {"{dir}/empty.bin"}, dataset([](const fs::path& d) {
                 write_file((d / "empty.bin").string(), "");
                 return (d / "empty.bin").string();
               })});
  t.push_back({"dataset", "/dev/zero", 1, {"/dev/zero"}, dataset([](const fs::path&) { return std::string("/dev/zero"); },
                                                                  {"--training.dataset", "tokens"})});
  t.push_back({"dataset", "a FIFO", 1, {"{dir}/fifo.bin"}, dataset([](const fs::path& d) {
                 mkfifo((d / "fifo.bin").c_str(), 0644);
                 return (d / "fifo.bin").string();
               })});
  t.push_back({"dataset", "token file: wrong magic", 1, {"{dir}/magic.bin"}, dataset([](const fs::path& d) {
                 write_file((d / "magic.bin").string(), token_file_bytes(32, cycle(2000, 16), "CTTOKS99"));
                 return (d / "magic.bin").string();
               })});
  t.push_back({"dataset", "token file: cut inside a token", 1, {"{dir}/cut.bin"}, dataset([](const fs::path& d) {
                 write_file((d / "cut.bin").string(), token_file_bytes(32, cycle(2000, 16)) + "\x01\x02");
                 return (d / "cut.bin").string();
               })});
  t.push_back({"dataset", "token file: header only", 1, {"{dir}/header.bin"}, dataset([](const fs::path& d) {
                 write_file((d / "header.bin").string(), token_file_bytes(32, {}));
                 return (d / "header.bin").string();
               })});
  t.push_back({"dataset", "token file: fewer tokens than seq_len + 1", 1, {"{dir}/short.bin"}, dataset([](const fs::path& d) {
                 write_file((d / "short.bin").string(), token_file_bytes(32, cycle(20, 16)));
                 return (d / "short.bin").string();
               })});
  t.push_back({"dataset", "token file: an id outside the model's vocabulary", 1, {"{dir}/bad_id.bin"},
               dataset([](const fs::path& d) {
                 auto ids = cycle(2000, 16);
                 ids[5] = 40;
                 write_file((d / "bad_id.bin").string(), token_file_bytes(32, ids));
                 return (d / "bad_id.bin").string();
               })});
  t.push_back({"dataset", "JSONL: a line that is not JSON", 1, {"{dir}/bad.jsonl"}, dataset([](const fs::path& d) {
                 write_file((d / "bad.jsonl").string(), "{\"text\": \"the cat\"}\n{\"text\": \"the dog\n");
                 return (d / "bad.jsonl").string();
               }, {"--model.tokenizer_path", tok, "--model.vocab_size", "300"})});
  t.push_back({"dataset", "JSONL: no text field", 1, {"{dir}/notext.jsonl"}, dataset([](const fs::path& d) {
                 write_file((d / "notext.jsonl").string(), "{\"body\": \"the cat\"}\n");
                 return (d / "notext.jsonl").string();
               }, {"--model.tokenizer_path", tok, "--model.vocab_size", "300"})});
  t.push_back({"dataset", "gzip: corrupt stream", 1, {"{dir}/corrupt.txt.gz"}, dataset([](const fs::path& d) {
                 write_file((d / "corrupt.txt.gz").string(), std::string("\x1f\x8b\x08\x00garbage-garbage-garbage", 27));
                 return (d / "corrupt.txt.gz").string();
               }, {"--model.tokenizer_path", tok, "--model.vocab_size", "300"})});
  t.push_back({"dataset", "zstd: corrupt stream", 1, {"{dir}/corrupt.jsonl.zst"}, dataset([](const fs::path& d) {
                 write_file((d / "corrupt.jsonl.zst").string(), std::string("\x28\xb5\x2f\xfd garbage garbage", 20));
                 return (d / "corrupt.jsonl.zst").string();
               }, {"--model.tokenizer_path", tok, "--model.vocab_size", "300"})});
  t.push_back({"dataset", "Parquet: not a Parquet file", 1, {"{dir}/text.parquet", "not a readable Parquet file"},
               dataset([](const fs::path& d) {
                 write_file((d / "text.parquet").string(), "{\"text\": \"JSON, not Parquet\"}\n");
                 return (d / "text.parquet").string();
               }, {"--model.tokenizer_path", tok, "--model.vocab_size", "300"})});
  // Mixtures ([[training.datasets]], given inline as an override): the key of the entry at fault.
  auto mixture = [tok](std::string entries, std::function<void(const fs::path&)> make = {}) {
    return [tok, entries, make](const fs::path& dir) {
      if (make) make(dir);
      std::string text = entries;
      for (size_t at; (at = text.find("{dir}")) != std::string::npos;) text.replace(at, 5, dir.string());
      return P{train(dir, {"--training.dataset_path", "", "--training.datasets", text, "--model.tokenizer_path", tok,
                           "--model.vocab_size", "300"})};
    };
  };
  auto good_jsonl = [](const fs::path& d) {
    write_file((d / "good.jsonl").string(), "{\"text\": \"the cat sat on the mat\"}\n");
    write_file((d / "blank.jsonl").string(), "{\"text\": \"  \"}\n{\"text\": \"\"}\n");
  };
  t.push_back({"dataset", "mixture: weight 0", 2, {"training.datasets[1].weight"},
               mixture("[{path = \"{dir}/good.jsonl\"}, {path = \"{dir}/good.jsonl\", weight = 0}]", good_jsonl)});
  t.push_back({"dataset", "mixture: weight nan", 2, {"training.datasets[0].weight"},
               mixture("[{path = \"{dir}/good.jsonl\", weight = nan}]", good_jsonl)});
  t.push_back({"dataset", "mixture: unknown format", 2, {"training.datasets[0].format", "'csv'"},
               mixture("[{path = \"{dir}/good.jsonl\", format = \"csv\"}]", good_jsonl)});
  t.push_back({"dataset", "mixture: unknown key in an entry", 2, {"training.datasets[0].wieght"},
               mixture("[{path = \"{dir}/good.jsonl\", wieght = 2}]", good_jsonl)});
  t.push_back({"dataset", "mixture: beside training.dataset_path", 2, {"training.dataset_path", "[[training.datasets]]"},
               [](const fs::path& dir) {
                 return P{train(dir, {"--training.datasets", "[{path = \"x.jsonl\"}]"})};
               }});
  t.push_back({"dataset", "mixture: a source that runs dry", 1, {"training.datasets[1] '{dir}/blank.jsonl'", "runs dry"},
               mixture("[{path = \"{dir}/good.jsonl\"}, {path = \"{dir}/blank.jsonl\", weight = 5}]", good_jsonl)});
  // ---- tokenizers ----
  t.push_back({"tokenizer", "missing file", 1, {"{dir}/missing.model"}, [](const fs::path& dir) {
                 return P{train(dir, {"--model.tokenizer_path", (dir / "missing.model").string()})};
               }});
  t.push_back({"tokenizer", "tiktoken: bad base64 (train)", 1, {"{dir}/tok.model:2"},
               tokenizer_file("tok.model", "AA== 0\n!!!! 1\n", true)});
  t.push_back({"tokenizer", "tiktoken: rank not a number", 1, {"{dir}/tok.model"}, tokenizer_file("tok.model", "AA== zero\n")});
  t.push_back({"tokenizer", "tiktoken: empty file", 1, {"{dir}/tok.model"}, tokenizer_file("tok.model", "")});
  t.push_back({"tokenizer", "tiktoken: one field", 1, {"{dir}/tok.model"}, tokenizer_file("tok.model", "AA==\n")});
  t.push_back({"tokenizer", "tiktoken: binary bytes", 1, {"{dir}/tok.model"},
               tokenizer_file("tok.model", std::string("\x00\xff\x13\x37\n\x00", 6))});
  t.push_back({"tokenizer", "tokenizer.json: not JSON", 1, {"{dir}/t/tokenizer.json"},
               tokenizer_file("t/tokenizer.json", "{\"model\": ")});
  t.push_back({"tokenizer", "tokenizer.json: WordPiece model", 1, {"{dir}/t/tokenizer.json"},
               tokenizer_file("t/tokenizer.json", tokenizer_json([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }))});
  t.push_back({"tokenizer", "tokenizer.json: model.type a number", 1, {"{dir}/t/tokenizer.json"},
               tokenizer_file("t/tokenizer.json", tokenizer_json([](nlohmann::json& j) { j["model"]["type"] = 3; }))});
  t.push_back({"tokenizer", "tokenizer.json: vocab an array (train)", 1, {"{dir}/t/tokenizer.json", "model.vocab must be an object"},
               tokenizer_file("t/tokenizer.json", tokenizer_json([](nlohmann::json& j) { j["model"]["vocab"] = {1, 2}; }),
                              true)});
  t.push_back({"tokenizer", "a directory with no tokenizer", 1, {"{dir}/empty_tok"}, [](const fs::path& dir) {
                 fs::create_directories(dir / "empty_tok");
                 return P{{{"tokenizer", "encode", "--tokenizer", (dir / "empty_tok").string(), "--text", "x"}}};
               }});
  // ---- checkpoints: step-4 damaged, step-2 must stay as it was ----
  auto step4 = std::string("{dir}/checkpoint/step-4");
  auto shard = step4 + "/rank-00000.bin";
  auto meta = step4 + "/metadata.json";
  auto resume = [](const fs::path& dir, const fs::path& step) { return resume_step4(dir, step); };
  auto ck = [&](const std::string& name, Args needles, std::function<void(const fs::path&)> damage,
                std::function<Process(const fs::path&, const fs::path&)> command) {
    t.push_back({"checkpoint", name, 1, needles, damaged_checkpoint(checkpoints, damage, command), true});
  };
  ck("truncated shard (resume)", {shard}, [](const fs::path& s) { truncate_half(s / "rank-00000.bin"); }, resume);
  ck("flipped byte in a shard (resume)", {shard}, [](const fs::path& s) { flip_byte(s / "rank-00000.bin", 3000); }, resume);
  ck("missing metadata.json (resume)", {step4}, [](const fs::path& s) { fs::remove(s / "metadata.json"); }, resume);
  ck("metadata.json not JSON (resume)", {meta}, [](const fs::path& s) { write_file((s / "metadata.json").string(), "{\"version\": "); },
     resume);
  ck("metadata.json truncated (resume)", {meta}, [](const fs::path& s) { truncate_half(s / "metadata.json"); }, resume);
  ck("missing shard file (resume)", {shard}, [](const fs::path& s) { fs::remove(s / "rank-00000.bin"); }, resume);
  ck("metadata: a slice's shape does not match its bytes", {meta}, [](const fs::path& s) {
       auto j = nlohmann::json::parse(read_file((s / "metadata.json").string()));
       for (auto& e : j["entries"]) {
         if (e["key"] == "tok_embeddings.weight") e["shape"] = e["global_shape"] = {64, 64};
       }
       write_file((s / "metadata.json").string(), j.dump());
     }, resume);
  ck("another model size: dim 128", {step4, "wk.weight", "128x128"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) { return resume_step4(dir, s, {"--model.dim", "128"}); });
  ck("another model size: 3 layers", {step4, "layers.2"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) { return resume_step4(dir, s, {"--model.n_layers", "3"}); });
  ck("another model size: vocab 48", {step4, "output.weight"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) { return resume_step4(dir, s, {"--model.vocab_size", "48"}); });
  ck("another model size: 2 KV heads", {step4, "wk.weight"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) { return resume_step4(dir, s, {"--model.n_kv_heads", "2"}); });
  // A model-only initial load reads the model's tensors only: the byte is flipped inside one.
  ck("initial_load_path: flipped byte in a model tensor", {"checkpoint.initial_load_path", shard},
     [](const fs::path& s) { flip_byte(s / "rank-00000.bin", tensor_offset(s, "tok_embeddings.weight") + 100); },
     [](const fs::path& dir, const fs::path& s) {
       return train(dir, {"--checkpoint.enable", "true", "--checkpoint.folder", (dir / "fresh").string(),
                          "--checkpoint.initial_load_path", s.string()});
     });
  ck("initial_load_path: missing", {"checkpoint.initial_load_path", "{dir}/checkpoint/step-9 does not exist"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) {
       return train(dir, {"--checkpoint.enable", "true", "--checkpoint.folder", (dir / "fresh").string(),
                          "--checkpoint.initial_load_path", (s.parent_path() / "step-9").string()});
     });
  // Said "<file>/metadata.json is missing".
  ck("initial_load_path: a file", {"checkpoint.initial_load_path", meta + " is not a directory"}, [](const fs::path&) {},
     [](const fs::path& dir, const fs::path& s) {
       return train(dir, {"--checkpoint.enable", "true", "--checkpoint.folder", (dir / "fresh").string(),
                          "--checkpoint.initial_load_path", (s / "metadata.json").string()});
     });
  ck("inspect --verify: flipped byte", {shard}, [](const fs::path& s) { flip_byte(s / "rank-00000.bin", 3000); },
     [](const fs::path&, const fs::path& s) { return Process{{"checkpoint", "inspect", "--verify", s.string()}}; });
  // Both used to pass inspect --verify, and the duplicate was read over the original on resume.
  ck("inspect --verify: an entry twice", {meta, "appears twice"}, [](const fs::path& s) {
       auto j = nlohmann::json::parse(read_file((s / "metadata.json").string()));
       j["entries"].push_back(j["entries"][0]);
       write_file((s / "metadata.json").string(), j.dump());
     },
     [](const fs::path&, const fs::path& s) { return Process{{"checkpoint", "inspect", "--verify", s.string()}}; });
  ck("inspect --verify: an entry of a rank outside the world", {meta, "outside world_size"}, [](const fs::path& s) {
       auto j = nlohmann::json::parse(read_file((s / "metadata.json").string()));
       j["entries"][0]["rank"] = 7;
       write_file((s / "metadata.json").string(), j.dump());
     },
     [](const fs::path&, const fs::path& s) { return Process{{"checkpoint", "inspect", "--verify", s.string()}}; });
  ck("export: shard cut inside a model tensor", {shard}, truncate_in_model,
     [](const fs::path& dir, const fs::path& s) {
       return Process{{"checkpoint", "export", "--input", s.string(), "--output", (dir / "out").string()}};
     });
  ck("export: metadata.json not JSON", {meta}, [](const fs::path& s) { write_file((s / "metadata.json").string(), "[[["); },
     [](const fs::path& dir, const fs::path& s) {
       return Process{{"checkpoint", "export", "--input", s.string(), "--output", (dir / "out").string()}};
     });
  ck("generate: missing metadata.json", {step4}, [](const fs::path& s) { fs::remove(s / "metadata.json"); },
     [](const fs::path&, const fs::path& s) {
       return Process{{"generate", "--checkpoint", s.string(), "--prompt-ids", "1,2", "--max-new-tokens", "2"}};
     });
  ck("generate: shard cut inside a model tensor", {shard}, truncate_in_model,
     [](const fs::path&, const fs::path& s) {
       return Process{{"generate", "--checkpoint", s.string(), "--prompt-ids", "1,2", "--max-new-tokens", "2"}};
     });
  // ---- Hugging Face files ----
  auto weights = std::string("{dir}/hf/model.safetensors");
  auto config = std::string("{dir}/hf/config.json");
  t.push_back({"hf", "safetensors: header length 2^60", 1, {weights}, damaged_hf(hf, [](const fs::path& h) {
                 auto path = (h / "model.safetensors").string();
                 auto bytes = read_file(path);
                 write_file(path, length_prefix(uint64_t(1) << 60) + bytes.substr(8));
               })});
  t.push_back({"hf", "safetensors: header longer than the file", 1, {weights}, damaged_hf(hf, [](const fs::path& h) {
                 auto path = (h / "model.safetensors").string();
                 auto bytes = read_file(path);
                 write_file(path, length_prefix(bytes.size()) + bytes.substr(8));
               })});
  t.push_back({"hf", "safetensors: header not JSON", 1, {weights}, damaged_hf(hf, [](const fs::path& h) {
                 auto path = (h / "model.safetensors").string();
                 auto bytes = read_file(path);
                 for (size_t i = 8; i < 24; ++i) bytes[i] = '#';
                 write_file(path, bytes);
               })});
  t.push_back({"hf", "safetensors: overlapping offsets", 1, {weights}, damaged_hf(hf, edit_header([](Safetensors& s) {
                 auto names = tensors_by_offset(s.header);
                 auto& second = s.header[names[1]]["data_offsets"];
                 uint64_t size = second[1].get<uint64_t>() - second[0].get<uint64_t>();
                 second = {uint64_t(0), size};  // over the first tensor
               }))});
  t.push_back({"hf", "safetensors: offsets past the end", 1, {weights}, damaged_hf(hf, edit_header([](Safetensors& s) {
                 auto names = tensors_by_offset(s.header);
                 auto& last = s.header[names.back()]["data_offsets"];
                 uint64_t size = last[1].get<uint64_t>() - last[0].get<uint64_t>();
                 last = {s.data.size(), s.data.size() + size};
               }))});
  t.push_back({"hf", "safetensors: unknown dtype", 1, {weights}, damaged_hf(hf, edit_header([](Safetensors& s) {
                 s.header[tensors_by_offset(s.header)[0]]["dtype"] = "F13";
               }))});
  t.push_back({"hf", "safetensors: shape not matching the byte count", 1, {weights},
               damaged_hf(hf, edit_header([](Safetensors& s) {
                 s.header[tensors_by_offset(s.header)[0]]["shape"] = {3, 5};
               }))});
  t.push_back({"hf", "safetensors: truncated (generate)", 1, {weights}, damaged_hf(hf, [](const fs::path& h) {
                 truncate_half(h / "model.safetensors");
               }, "generate")});
  t.push_back({"hf", "safetensors: overlapping offsets (generate)", 1, {weights},
               damaged_hf(hf, edit_header([](Safetensors& s) {
                 auto names = tensors_by_offset(s.header);
                 auto& second = s.header[names[1]]["data_offsets"];
                 uint64_t size = second[1].get<uint64_t>() - second[0].get<uint64_t>();
                 second = {uint64_t(0), size};
               }), "generate")});
  t.push_back({"hf", "safetensors: missing", 1, {"{dir}/hf"}, damaged_hf(hf, [](const fs::path& h) {
                 fs::remove(h / "model.safetensors");
               })});
  t.push_back({"hf", "config.json: not JSON", 1, {config}, damaged_hf(hf, [](const fs::path& h) {
                 write_file((h / "config.json").string(), "{\"hidden_size\": 64,");
               })});
  t.push_back({"hf", "config.json: missing", 1, {"{dir}/hf", "No such file or directory"}, damaged_hf(hf, [](const fs::path& h) {
                 fs::remove(h / "config.json");
               })});
  t.push_back({"hf", "config.json: hidden_size missing", 1, {config, "hidden_size"},
               damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j.erase("hidden_size"); }))});
  t.push_back({"hf", "config.json: hidden_size a string", 1, {config, "hidden_size"},
               damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j["hidden_size"] = "big"; }))});
  t.push_back({"hf", "config.json: rms_norm_eps -1", 1, {config, "rms_norm_eps"},
               damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j["rms_norm_eps"] = -1; }))});
  t.push_back({"hf", "config.json: heads do not divide hidden_size", 1, {config, "num_attention_heads"},
               damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j["num_attention_heads"] = 5; }))});
  t.push_back({"hf", "config.json: vocab_size not the tensors' (generate)", 1, {"{dir}/hf", "output.weight"},
               damaged_hf(hf, edit_config_json([](nlohmann::json& j) { j["vocab_size"] = 40; }), "generate")});
  // ---- the launcher and the rendezvous ----
  t.push_back({"launcher", "--nnodes 0", 2, {"--nnodes"}, [](const fs::path&) { return launcher({"--nnodes", "0"}); }});
  t.push_back({"launcher", "--nnodes abc", 2, {"--nnodes"}, [](const fs::path&) { return launcher({"--nnodes", "abc"}); }});
  t.push_back({"launcher", "--node-rank past --nnodes", 2, {"--node-rank"},
               [](const fs::path&) { return launcher({"--nnodes", "2", "--node-rank", "5", "--master-port", "29400"}); }});
  t.push_back({"launcher", "--node-rank -1", 2, {"--node-rank"},
               [](const fs::path&) { return launcher({"--nnodes", "2", "--node-rank", "-1", "--master-port", "29400"}); }});
  t.push_back({"launcher", "--master-port 70000", 2, {"--master-port"},
               [](const fs::path&) { return launcher({"--master-port", "70000"}); }});
  t.push_back({"launcher", "--master-port -5", 2, {"--master-port"},
               [](const fs::path&) { return launcher({"--master-port", "-5"}); }});
  t.push_back({"launcher", "--master-port 0 across nodes", 2, {"--master-port"},
               [](const fs::path&) { return launcher({"--nnodes", "2", "--master-port", "0"}); }});
  t.push_back({"launcher", "--nproc-per-node 0", 2, {"--nproc-per-node"},
               [](const fs::path&) { return launcher({"--nproc-per-node", "0"}); }});
  t.push_back({"launcher", "store port in use", 1, {"{port}", "already in use"}, [](const fs::path&) {
                 return launcher({"--master-port", std::to_string(port_in_use())});
               }});
  // Issue #17 item 11: node 0 retried an unresolvable name for --rdzv-timeout (300 s), ignoring
  // SIGTERM, with a c10d warning per try; node 1 waited as long for "nothing listens there".
  t.push_back({"launcher", "--master-addr unresolvable (node 0)", 2, {"--master-addr", kNoSuchHost}, [](const fs::path&) {
                 return launcher({"--nnodes", "2", "--node-rank", "0", "--master-addr", kNoSuchHost,
                                  "--master-port", std::to_string(free_port())});
               }});
  t.push_back({"launcher", "--master-addr unresolvable (node 1)", 2, {"--master-addr", kNoSuchHost}, [](const fs::path&) {
                 return launcher({"--nnodes", "2", "--node-rank", "1", "--master-addr", kNoSuchHost,
                                  "--master-port", std::to_string(free_port())});
               }});
  t.push_back({"launcher", "worker rank 0: MASTER_PORT in use", 1, {"rank 0", "{port}"}, [](const fs::path& dir) {
                 auto p = ranks(dir, 2, "127.0.0.1", port_in_use(), [](int) { return Args{}; });
                 return P{p[0]};
               }});
  // Printed c10d's retries and two backtraces before the error line.
  t.push_back({"launcher", "worker rank 1: MASTER_ADDR unresolvable", 1, {"rank 1", kNoSuchHost}, [](const fs::path& dir) {
                 auto p = ranks(dir, 2, kNoSuchHost, free_port(), [](int) { return Args{}; });
                 return P{p[1]};
               }});
  t.push_back({"launcher", "worker rank 1: no store within init_timeout_seconds", 1, {"rank 1", "127.0.0.1:{port}"},
               [](const fs::path& dir) {
                 auto p = ranks(dir, 2, "127.0.0.1", free_port(),
                                [](int) { return Args{"--comm.init_timeout_seconds", "2"}; });
                 return P{p[1]};
               }});
  // Issue #17 item 5: rank 0 hosts the store; every rank names the key that differs.
  t.push_back({"launcher", "ranks disagree on the config (rank 0 hosts the store)", 1, {"debug.seed (7 vs 8)"},
               [](const fs::path& dir) {
                 return ranks(dir, 3, "127.0.0.1", free_port(), [](int r) {
                   return Args{"--debug.seed", r == 2 ? "8" : "7"};
                 });
               }});
  // The same race in the rendezvous itself: rank 1 printed "Failed to recv" and a backtrace.
  t.push_back({"launcher", "ranks disagree on WORLD_SIZE (rank 0 hosts the store)", 1, {"WORLD_SIZE"},
               [](const fs::path& dir) {
                 return ranks(dir, 2, "127.0.0.1", free_port(), [](int) { return Args{}; },
                              [](int r) { return r == 0 ? std::string("2") : std::string("3"); });
               }});
  return t;
}

TEST_F(CliBadInput, EveryCaseIsOneLineNamingTheCulpritWithItsExitCode) {
  const auto table = bad_input_table(checkpoints(), hf(), tokenizer());
  const auto suite_checkpoints = snapshot(checkpoints());
  const auto suite_hf = snapshot(hf());
  const auto good_step2 = snapshot(checkpoints() / "step-2");
  std::map<std::string, int> per_kind;
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& c = table[i];
    ++per_kind[c.kind];
    const auto dir = root_->path() / ("case-" + std::to_string(i));
    fs::create_directories(dir);
    const auto processes = c.setup(dir);
    // "{port}": the port a launcher case was given (the value after --master-port or MASTER_PORT).
    std::string port;
    for (const auto& p : processes) {
      for (size_t a = 0; a + 1 < p.args.size(); ++a) {
        if (p.args[a] == "--master-port") port = p.args[a + 1];
      }
      for (const auto& [k, v] : p.env) {
        if (k == "MASTER_PORT") port = v;
      }
    }
    const auto outcomes = run_together(processes, dir);
    for (int fd : g_held_sockets) ::close(fd);
    g_held_sockets.clear();
    for (size_t r = 0; r < outcomes.size(); ++r) {
      const auto& o = outcomes[r];
      SCOPED_TRACE("case " + std::to_string(i) + " [" + c.kind + "] " + c.name + ", process " + std::to_string(r) +
                   "\nstderr:\n" + o.err + "stdout (last 2000 bytes):\n" +
                   o.out.substr(o.out.size() > 2000 ? o.out.size() - 2000 : 0));
      EXPECT_FALSE(o.timed_out) << "still running after " << kTimeoutSeconds << " s";
      EXPECT_EQ(o.signal, 0) << "killed by signal " << o.signal;
      EXPECT_EQ(o.exit_code, c.exit_code);
      EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "stderr is not one line";
      EXPECT_TRUE(!o.err.empty() && o.err.back() == '\n');
      EXPECT_EQ(o.err.rfind("ctitan: ", 0), 0u);
      for (auto needle : c.needles) {
        replace_all(needle, "{dir}", dir.string());
        replace_all(needle, "{port}", port);
        EXPECT_NE(o.err.find(needle), std::string::npos) << "the error does not name " << needle;
      }
      for (const char* noise : {"internal error", "terminate called", "Exception raised from", "frame #", "[c10d]",
                                "Broken pipe"}) {
        EXPECT_EQ(o.err.find(noise), std::string::npos) << "noise: " << noise;
      }
    }
    if (c.checkpoint) {
      EXPECT_EQ(snapshot(dir / "checkpoint" / "step-2"), good_step2)
          << "case " << i << " " << c.name << ": the good step-2 checkpoint changed";
    }
    fs::remove_all(dir);
  }
  EXPECT_EQ(snapshot(checkpoints()), suite_checkpoints);
  EXPECT_EQ(snapshot(hf()), suite_hf);
  std::cout << "bad-input table: " << table.size() << " cases:";
  for (const auto& [kind, n] : per_kind) std::cout << " " << kind << " " << n;
  std::cout << "\n";
  EXPECT_GE(table.size(), 60u);
}

}  // namespace
}  // namespace ctitan
