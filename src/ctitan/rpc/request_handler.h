#pragma once
// The callee's side of ctitan's calls: upstream's RequestCallbackNoPython with the user-function
// entry points filled in (decode the envelope, look the function up, run it, encode the reply).
// Every other message type (RRef protocol, distributed autograd) stays upstream's.
#include <memory>
#include <string>

namespace torch::distributed::rpc {
class RequestCallback;
}

namespace ctitan::rpc {

// `self_name` is this worker's name, which error replies carry.
std::unique_ptr<torch::distributed::rpc::RequestCallback> make_request_handler(const std::string& self_name);

}  // namespace ctitan::rpc
