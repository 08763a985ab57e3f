// ctitan's RPC payloads (rpc/value_codec, rpc/wire), as a peer would send them: the first byte
// picks 0-4 small tensors for the message's tensor table, the rest is decoded as a request and as
// a response, with RRefs rejected. Only a one-line InputError naming the peer is accepted. And
// whatever decodes must re-encode to bytes that decode to an equal value, and re-encode to the
// same bytes again.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ctitan/rpc/value_codec.h"
#include "ctitan/rpc/wire.h"
#include "fuzz_support.h"

namespace {

using namespace ctitan::rpc;

const std::vector<at::Tensor>& tensor_pool() {
  static const std::vector<at::Tensor> pool = {at::ones({2}), at::arange(6, at::kLong).view({2, 3}),
                                               at::scalar_tensor(1.5, at::kDouble), at::empty({0}, at::kBFloat16)};
  return pool;
}

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "rpc_wire round trip: %s\n", what);
  std::abort();
}

bool same_args(const std::vector<c10::IValue>& a, const std::vector<c10::IValue>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!values_equal(a[i], b[i])) return false;
  }
  return true;
}

void check_request(const Request& first) {
  std::vector<at::Tensor> tensors;
  const auto bytes = encode_request(first, tensors);  // throws (and so aborts) if a decoded value does not encode
  const auto again = decode_request(bytes, tensors, "peer0");
  if (again.kind != first.kind || again.function != first.function || !same_args(again.args, first.args)) {
    broken("a re-encoded request decodes to another request");
  }
  std::vector<at::Tensor> tensors2;
  if (encode_request(again, tensors2) != bytes) broken("a request's encoding is not stable");
}

void check_response(const Response& first) {
  std::vector<at::Tensor> tensors;
  const auto bytes = encode_response(first, tensors);
  const auto again = decode_response(bytes, tensors, "peer0");
  if (again.status != first.status || again.worker != first.worker || again.message != first.message ||
      !values_equal(again.value, first.value)) {
    broken("a re-encoded response decodes to another response");
  }
  std::vector<at::Tensor> tensors2;
  if (encode_response(again, tensors2) != bytes) broken("a response's encoding is not stable");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& pool = tensor_pool();
  const std::vector<at::Tensor> tensors(pool.begin(), pool.begin() + data[0] % (pool.size() + 1));
  const auto payload = ctitan::fuzz::as_text(data + 1, size - 1);
  ctitan::fuzz::expect_ctitan_errors_only([&] { check_request(decode_request(payload, tensors, "peer0")); },
                                          "peer0");
  ctitan::fuzz::expect_ctitan_errors_only([&] { check_response(decode_response(payload, tensors, "peer0")); },
                                          "peer0");
  return 0;
}
