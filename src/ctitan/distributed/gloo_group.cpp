#include "ctitan/distributed/gloo_group.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>
#include <map>
#include <mutex>


#include "ctitan/common/message_text.h"
#include "ctitan/distributed/comm_error.h"
#include "ctitan/distributed/dist_env.h"

namespace ctitan::distributed {
namespace {

// One Gloo device per bind address for the whole process: every group's contexts then share one
// I/O thread instead of starting one each (a mesh has several groups; the machine has 2 cores).
std::shared_ptr<::gloo::transport::Device> shared_device(const std::string& host) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<::gloo::transport::Device>> devices;
  std::lock_guard<std::mutex> lock(mutex);
  auto& device = devices[host];
  if (!device) {
    if (host.rfind("if:", 0) == 0) {
      device = c10d::ProcessGroupGloo::createDeviceForInterface(host.substr(3));
    } else if (host == "hostname") {
      device = c10d::ProcessGroupGloo::createDefaultDevice();  // falls back to loopback
    } else {
      device = c10d::ProcessGroupGloo::createDeviceForHostname(host);
    }
  }
  return device;
}

}  // namespace

std::string default_bind_host() {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) return std::string("if:") + ifname;
  auto env = read_dist_env();
  return env.local_world_size >= env.world_size ? "127.0.0.1" : "hostname";
}

c10::intrusive_ptr<c10d::Backend> create_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& name, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& bind_host) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError(fmt::format("group '{}': rank {} is outside group size {}", name, rank, size));
  }
  auto host = bind_host.empty() ? default_bind_host() : bind_host;
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(shared_device(host));
    // Two worker threads: an async collective can run while the next one is issued.
    options->threads = 2;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
    return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options);
  } catch (const c10::Error& e) {
    throw CommError(fmt::format("group '{}' creation failed on rank {} of {} (bind {}, timeout {}s): {}", name, rank,
                                size, host, timeout.count() / 1000.0, first_line(e.what_without_backtrace())));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("group '{}' creation failed on rank {} of {} (bind {}, timeout {}s): {}", name, rank,
                                size, host, timeout.count() / 1000.0, first_line(e.what())));
  }
}

}  // namespace ctitan::distributed
