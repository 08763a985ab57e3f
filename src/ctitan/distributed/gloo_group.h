#pragma once
// Creating the c10d process group behind a Communicator: Gloo over TCP for CPU tensors, and
// (only when built with CTITAN_WITH_NCCL, untested) NCCL for CUDA tensors.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
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
// the form "if:eth0" names an interface. Gloo's own per-operation timeout is `timeout` for the
// life of the group (Gloo 1.13 offers no setter through c10d).
c10::intrusive_ptr<c10d::ProcessGroup> create_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& name, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& bind_host);

#ifdef CTITAN_WITH_NCCL
// UNTESTED: no CUDA libtorch exists on the development machines. Returns null when CUDA is not
// available at run time.
c10::intrusive_ptr<c10d::ProcessGroup> create_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::string& name, int rank, int size,
                                                        std::chrono::milliseconds timeout);
#endif

}  // namespace ctitan::distributed
