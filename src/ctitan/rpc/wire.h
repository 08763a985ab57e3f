#pragma once
// The envelopes of ctitan's user calls (docs/design/rpc.md, decision 2): what travels inside
// upstream's PythonCall / PythonResp messages. The agent never looks inside.
//   request  := "CTR1" u8 kind u16 name_len name value(args tuple)
//   response := "CTR1" u8 status value(result)                        status 0
//             | "CTR1" u8 status u16 wlen worker u32 mlen message      status 1..4
#include <ATen/core/ivalue.h>

#include <string>
#include <string_view>
#include <vector>

#include "ctitan/rpc/value_codec.h"

namespace ctitan::rpc {

constexpr std::string_view kWireMagic = "CTR1";
constexpr size_t kMaxFunctionName = 256;

enum class RequestKind : uint8_t { Call = 1, Remote = 2 };

struct Request {
  RequestKind kind = RequestKind::Call;
  std::string function;
  std::vector<c10::IValue> args;
};

enum class ResponseStatus : uint8_t {
  Ok = 0,
  Exception = 1,        // the function threw; `message` is its what()
  UnknownFunction = 2,  // no function of that name on the callee
  BadArguments = 3,     // the arguments did not convert to the parameters; `message` says which
  NotEncodable = 4,     // the result could not be encoded
};

struct Response {
  ResponseStatus status = ResponseStatus::Ok;
  c10::IValue value;    // status Ok
  std::string worker;   // status 1..4: the callee's name
  std::string message;  // status 1..4: one line
};

// Throws InputError unless `name` is 1..256 bytes of [A-Za-z0-9_.:-].
void validate_function_name(const std::string& name);

// Encoding throws InputError for a value the codec cannot carry; tensors are appended to `tensors`.
std::string encode_request(const Request& request, std::vector<at::Tensor>& tensors,
                           const RRefCodecHook& hook = reject_rrefs());
std::string encode_response(const Response& response, std::vector<at::Tensor>& tensors,
                            const RRefCodecHook& hook = reject_rrefs());

// Decoding throws InputError("rpc payload from <source>: ...") for anything malformed, including
// trailing bytes; a payload without the magic is "not a ctitan RPC payload".
Request decode_request(std::string_view bytes, const std::vector<at::Tensor>& tensors, const std::string& source,
                       const RRefCodecHook& hook = reject_rrefs());
Response decode_response(std::string_view bytes, const std::vector<at::Tensor>& tensors, const std::string& source,
                         const RRefCodecHook& hook = reject_rrefs());

}  // namespace ctitan::rpc
