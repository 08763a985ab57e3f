#include "ctitan/rpc/wire.h"

#include <fmt/format.h>

#include <limits>

#include "ctitan/common/error.h"

namespace ctitan::rpc {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':' || c == '-';
}

// Only the name's first 64 bytes go into a message, with non-printable bytes shown as '?'.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (s.size() > 64) out += "...";
  return out;
}

std::string name_error(std::string_view name) {
  if (name.empty()) return "the function name is empty";
  if (name.size() > kMaxFunctionName) {
    return fmt::format("function name '{}' is {} bytes (at most {})", printable(name), name.size(), kMaxFunctionName);
  }
  for (char c : name) {
    if (!name_char(c)) {
      return fmt::format("function name '{}' has a character outside [A-Za-z0-9_.:-]", printable(name));
    }
  }
  return "";
}

void expect_magic(ByteReader& in) {
  if (in.remaining() < kWireMagic.size() || in.bytes(kWireMagic.size()) != kWireMagic) {
    in.fail("not a ctitan RPC payload (no CTR1 magic; is the peer a Python or another program?)");
  }
}

}  // namespace

void validate_function_name(const std::string& name) {
  if (auto why = name_error(name); !why.empty()) throw InputError("rpc: " + why);
}

std::string encode_request(const Request& request, std::vector<at::Tensor>& tensors, const RRefCodecHook& hook) {
  validate_function_name(request.function);
  ByteWriter out;
  out.bytes(kWireMagic);
  out.u8(uint8_t(request.kind));
  out.u16(uint16_t(request.function.size()));
  out.bytes(request.function);
  encode_value(c10::ivalue::Tuple::create(request.args), out, tensors, hook);
  return out.take();
}

std::string encode_response(const Response& response, std::vector<at::Tensor>& tensors, const RRefCodecHook& hook) {
  ByteWriter out;
  out.bytes(kWireMagic);
  out.u8(uint8_t(response.status));
  if (response.status == ResponseStatus::Ok) {
    encode_value(response.value, out, tensors, hook);
  } else {
    // Both are texts of our own making; clip rather than fail on an absurd what().
    auto worker = std::string_view(response.worker).substr(0, std::numeric_limits<uint16_t>::max());
    auto message = std::string_view(response.message).substr(0, 1 << 20);
    out.u16(uint16_t(worker.size()));
    out.bytes(worker);
    out.u32(uint32_t(message.size()));
    out.bytes(message);
  }
  return out.take();
}

Request decode_request(std::string_view bytes, const std::vector<at::Tensor>& tensors, const std::string& source,
                       const RRefCodecHook& hook) {
  ByteReader in(bytes, source);
  expect_magic(in);
  Request request;
  const uint8_t kind = in.u8();
  if (kind != uint8_t(RequestKind::Call) && kind != uint8_t(RequestKind::Remote)) {
    in.fail(fmt::format("unknown request kind {}", kind));
  }
  request.kind = RequestKind(kind);
  const uint16_t name_len = in.u16();
  request.function = std::string(in.bytes(name_len));
  if (auto why = name_error(request.function); !why.empty()) in.fail(why);
  auto args = decode_value(in, tensors, hook);
  if (!args.isTuple()) in.fail(fmt::format("the arguments are a {}, not a tuple", value_type_name(args)));
  const auto& elements = args.toTupleRef().elements();
  request.args.assign(elements.begin(), elements.end());
  in.expect_end();
  return request;
}

Response decode_response(std::string_view bytes, const std::vector<at::Tensor>& tensors, const std::string& source,
                         const RRefCodecHook& hook) {
  ByteReader in(bytes, source);
  expect_magic(in);
  Response response;
  const uint8_t status = in.u8();
  if (status > uint8_t(ResponseStatus::NotEncodable)) in.fail(fmt::format("unknown response status {}", status));
  response.status = ResponseStatus(status);
  if (response.status == ResponseStatus::Ok) {
    response.value = decode_value(in, tensors, hook);
  } else {
    const uint16_t wlen = in.u16();
    response.worker = std::string(in.bytes(wlen));
    const uint32_t mlen = in.u32();
    response.message = std::string(in.bytes(mlen));
  }
  in.expect_end();
  return response;
}

}  // namespace ctitan::rpc
