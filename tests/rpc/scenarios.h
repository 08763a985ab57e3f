#pragma once
// The scenarios of rpc_test_worker, one function each (rpc_test_worker.cpp dispatches). Every worker
// registers every scenario's functions, so all registries agree whatever the scenario.
#include <string>

#include "ctitan/rpc/agent.h"
#include "rpc/worker_checks.h"

namespace rpc_test {

void register_call_functions();       // rpc_test_worker.cpp
void register_lifetime_functions();   // lifetime_scenarios.cpp
void register_rref_functions();       // rref_scenario.cpp
void register_autograd_functions();   // autograd_scenarios.cpp

void run_calls(const std::string& self, const std::string& peer);
void run_errors(const std::string& self, const std::string& peer);
// These start RPC themselves.
void run_kill_peer(const Worker& w, ctitan::rpc::RpcOptions& options);
void run_shutdown_inflight(const Worker& w, ctitan::rpc::RpcOptions& options);
void run_rref(const Worker& w, ctitan::rpc::RpcOptions& options);
void run_dist_autograd(const Worker& w, ctitan::rpc::RpcOptions& options);
void run_dist_optim(const Worker& w, ctitan::rpc::RpcOptions& options);

}  // namespace rpc_test
