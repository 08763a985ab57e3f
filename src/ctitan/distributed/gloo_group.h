#pragma once
// Creating the c10d Gloo backend behind a Communicator's CPU collectives (gloo_backend.h).
//
// libtorch's wheels do not ship Gloo's headers, which ProcessGroupGloo.hpp includes; Debian's
// libgloo-dev provides them. Only this file includes ProcessGroupGloo.hpp, and it touches Gloo
// objects only through out-of-line c10d functions compiled inside libtorch (device creation,
// the constructor) and the c10d::Backend interface, so the declarations need not match the
// Gloo revision libtorch was built with.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace ctitan::distributed {

// Where Gloo binds its sockets when the caller does not say: the interface named by
// GLOO_SOCKET_IFNAME if set; 127.0.0.1 when every rank of the job is on this machine
// (LOCAL_WORLD_SIZE == WORLD_SIZE, or no launcher); else this machine's hostname.
std::string default_bind_host();

// A Gloo group of `size` ranks over PrefixStore(name, store), connected within `timeout`, or a
// CommError naming the group and rank. `bind_host` empty means default_bind_host(); a value of
// the form "if:eth0" names an interface. Gloo's own per-operation timeout starts at `timeout`;
// c10d::Backend::setTimeout changes it later.
c10::intrusive_ptr<c10d::Backend> create_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& name, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& bind_host);


}  // namespace ctitan::distributed
