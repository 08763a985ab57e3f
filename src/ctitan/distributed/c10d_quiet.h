#pragma once
// Creating a c10d TCPStore: what ctitan checks first, and the logging it silences meanwhile.
//
// c10d logs each failed attempt to serve or reach a store on stderr (warnings and errors, some
// with a C++ backtrace) and only then throws; ctitan turns the exception into its one error line
// naming the address. An unresolvable host is retried by c10d until the timeout, so it is
// resolved here first and refused at once.
#include <c10/util/Logging.h>
#include <netdb.h>
#include <sys/socket.h>

#include <mutex>
#include <string>

namespace ctitan::distributed {

// Raises c10's log threshold to FATAL while alive (c10d's own warnings and errors obey it too).
// Nested and concurrent guards (tests run ranks as threads) restore the level once, at the last.
class QuietC10dLogs {
 public:
  QuietC10dLogs() {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().depth++ == 0) {
      state().saved = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = 3;  // c10::GLOG_FATAL
    }
  }
  ~QuietC10dLogs() {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (--state().depth == 0) FLAGS_caffe2_log_level = state().saved;
  }
  QuietC10dLogs(const QuietC10dLogs&) = delete;
  QuietC10dLogs& operator=(const QuietC10dLogs&) = delete;

 private:
  struct State {
    std::mutex mutex;
    int depth = 0;
    int saved = 0;
  };
  static State& state() {
    static State s;
    return s;
  }
};

// "" when `host` resolves to an address for TCP, else the resolver's reason
// ("Name or service not known").
inline std::string host_resolution_error(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found) freeaddrinfo(found);
  if (rc == 0) return "";
  return host.empty() ? std::string("the address is empty") : std::string(gai_strerror(rc));
}

}  // namespace ctitan::distributed
