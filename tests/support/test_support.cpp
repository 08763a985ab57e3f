#include "support/test_support.h"

#include <cstdlib>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

namespace ctitan::testing {
namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "ctitan_test_XXXXXX").string();
  path_ = mkdtemp(pattern.data());
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

void flip_byte(const std::filesystem::path& path, size_t at) {
  auto bytes = read_file(path.string());
  bytes[at] = char(bytes[at] ^ 0x10);
  write_file(path.string(), bytes);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string generated_corpus(int n_docs, int words_per_doc, unsigned seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to",
                                "big", "red", "house", "with", "small", "blue", "door", "every", "day", "it"};
  std::mt19937 rng(seed);
  std::ostringstream out;
  for (int d = 0; d < n_docs; ++d) {
    for (int w = 0; w < words_per_doc; ++w) out << (w ? " " : "") << words[rng() % 20];
    out << ".\n%\n";
  }
  return out.str();
}

// 20 documents of pseudo-text: a few fixed words ("hello" and "world" the most frequent) mixed
// with invented syllable words, so there are many pairs to merge. mt19937's output is fixed by
// the standard, so the corpus is the same everywhere (std distributions are not, hence modulo).
std::vector<std::string> make_corpus() {
  const std::vector<std::string> fixed = {
      "hello",  "world", "the", "tokenizer", "training", "café", "naïve", "über",
      "日本語", "中文",  "😀",   "don't",     "we're",    "I'LL", "12345", "3.14159",
      "a",      "of",    "and", "to",        "in",       "is",   "x",     "-->"};
  const std::vector<std::string> syllables = {"ka", "to",  "ri", "men", "sa", "lo",  "vi", "dun",
                                              "pe", "gor", "ba", "nu",  "zi", "tha", "qu", "el"};
  std::mt19937 rng(1234);
  std::vector<std::string> invented;
  for (int i = 0; i < 500; ++i) {
    std::string word;
    for (uint32_t n = 1 + rng() % 4; n > 0; --n) word += syllables[rng() % syllables.size()];
    invented.push_back(word);
  }
  // Squaring a uniform index favours the start of a list (Zipf-like).
  auto pick = [&rng](const std::vector<std::string>& words) -> const std::string& {
    size_t r = rng() % words.size();
    return words[r * r / words.size()];
  };
  std::vector<std::string> texts;
  for (int doc = 0; doc < 20; ++doc) {
    std::string text;
    for (int i = 0; i < 1500; ++i) {
      text += rng() % 2 ? pick(fixed) : pick(invented);
      uint32_t sep = rng() % 16;
      text += sep == 0 ? "\n" : sep == 1 ? ",  " : sep == 2 ? "\n\n" : " ";
    }
    texts.push_back(text);
  }
  return texts;
}

std::vector<std::string> utf8_pieces(const std::string& text, size_t bytes) {
  std::vector<std::string> pieces;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = std::min(text.size(), begin + bytes);
    while (end < text.size() && end > begin + 1 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    pieces.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return pieces;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

int64_t first_logged_step(const std::string& output) {
  static const std::regex step_line(R"((^|[^e] )step: +([0-9]+) +loss:)");  // not "validate step:"
  std::smatch m;
  return std::regex_search(output, m, step_line) ? std::stoll(m[2].str()) : -1;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

namespace {

std::string from_env_or(const char* name, const char* compiled_in) {
  const char* value = std::getenv(name);
  return value && *value ? value : compiled_in;
}

}  // namespace

std::string ctitan_bin() { return from_env_or("CTITAN_BIN", CTITAN_BIN); }
std::string python_path() { return from_env_or("CTITAN_PYTHON", CTITAN_PYTHON); }
std::string source_dir() { return from_env_or("CTITAN_SOURCE_DIR", CTITAN_SOURCE_DIR); }
bool have_python() { return !python_path().empty(); }

RunResult run_ctitan(const std::vector<std::string>& args, int timeout_s) {
  return run_program(ctitan_bin(), args, timeout_s);
}

RunResult run_python(const std::vector<std::string>& args, int timeout_s) {
  return run_program(python_path(), args, timeout_s);
}

RunResult run_program(const std::string& program, const std::vector<std::string>& args, int timeout_s) {
  char out_template[] = "/tmp/ctitan_run_XXXXXX";
  int out_fd = mkstemp(out_template);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  close(out_fd);
  RunResult result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.output = read_file(out_template) + "\n[test harness: killed after timeout]";
      unlink(out_template);
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = read_file(out_template);
  unlink(out_template);
  return result;
}

}  // namespace ctitan::testing
