// RPC without an agent: the value codec and the wire envelopes (round trips of every tag, one
// InputError line per corrupt input), argument conversion, the registry and Future. The calls
// between processes are tests/rpc/rpc_cli_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "ctitan/common/error.h"
#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/future.h"
#include "ctitan/rpc/ivalue_convert.h"
#include "ctitan/rpc/registry.h"
#include "ctitan/rpc/value_codec.h"
#include "ctitan/rpc/wire.h"

namespace ctitan::rpc {
namespace {

using c10::IValue;

struct Encoded {
  std::string bytes;
  std::vector<at::Tensor> tensors;
};

Encoded encode(const IValue& v) {
  Encoded e;
  ByteWriter out;
  encode_value(v, out, e.tensors);
  e.bytes = out.take();
  return e;
}

IValue decode(const std::string& bytes, const std::vector<at::Tensor>& tensors = {}) {
  ByteReader in(bytes, "worker7");
  auto v = decode_value(in, tensors);
  in.expect_end();
  return v;
}

IValue round_trip(const IValue& v) {
  auto e = encode(v);
  return decode(e.bytes, e.tensors);
}

// The InputError text of decoding `bytes`, or "no error".
std::string decode_error(const std::string& bytes, const std::vector<at::Tensor>& tensors = {}) {
  try {
    decode(bytes, tensors);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string le64(int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

TEST(ValueCodec, ScalarsRoundTripToTheSameBytes) {
  EXPECT_EQ(encode(IValue()).bytes, std::string(1, '\0'));
  EXPECT_EQ(encode(IValue(true)).bytes, std::string(1, '\2'));
  EXPECT_EQ(encode(IValue(int64_t(-2))).bytes, "\3" + le64(-2));
  for (IValue v : {IValue(), IValue(false), IValue(true), IValue(std::numeric_limits<int64_t>::min()),
                   IValue(std::numeric_limits<int64_t>::max()), IValue(-0.0), IValue(std::nan("")), IValue(1e-310),
                   IValue(std::string("a\0b", 3)), IValue(std::string())}) {
    auto back = round_trip(v);
    EXPECT_TRUE(values_equal(back, v)) << v;
    EXPECT_EQ(encode(back).bytes, encode(v).bytes) << v;
  }
  // values_equal compares doubles bitwise: -0.0 is not 0.0.
  EXPECT_FALSE(values_equal(round_trip(IValue(-0.0)), IValue(0.0)));
}

TEST(ValueCodec, TensorsTravelInTheTableNotInTheBytes) {
  auto strided = torch::arange(12, torch::kFloat).view({3, 4}).t();
  auto scalar = torch::scalar_tensor(2.5, torch::kDouble);
  auto bf16 = torch::linspace(-1, 1, 7).to(torch::kBFloat16);
  auto e = encode(to_ivalue(std::make_tuple(strided, scalar, bf16)));
  ASSERT_EQ(e.tensors.size(), 3u);
  EXPECT_EQ(e.bytes, "\x08" + le32(3) + "\x06" + le32(0) + "\x06" + le32(1) + "\x06" + le32(2));
  // The table holds the caller's tensors themselves (the agent copies them onto the wire).
  EXPECT_TRUE(e.tensors[0].is_same(strided));
  auto back = decode(e.bytes, e.tensors).toTupleRef().elements();
  EXPECT_TRUE(back[0].toTensor().is_same(strided));
  EXPECT_EQ(back[1].toTensor().dim(), 0);
  EXPECT_EQ(back[2].toTensor().scalar_type(), torch::kBFloat16);
  EXPECT_THROW(encode(IValue(at::Tensor())), InputError);
}

TEST(ValueCodec, ListsKeepTheirElementType) {
  auto ints = round_trip(to_ivalue(std::vector<int64_t>{1, -2}));
  EXPECT_EQ(ints.to<std::vector<int64_t>>(), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(*ints.toList().elementType(), *c10::IntType::get());
  EXPECT_EQ(round_trip(to_ivalue(std::vector<double>{0.5})).to<std::vector<double>>(), std::vector<double>{0.5});
  EXPECT_EQ(round_trip(to_ivalue(std::vector<bool>{true, false})).to<std::vector<bool>>(),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(round_trip(to_ivalue(std::vector<std::string>{"a", ""})).to<std::vector<std::string>>(),
            (std::vector<std::string>{"a", ""}));
  auto tensors = round_trip(to_ivalue(std::vector<at::Tensor>{torch::ones({2})}));
  EXPECT_EQ(tensors.to<std::vector<at::Tensor>>().size(), 1u);
  auto nested = to_ivalue(std::vector<std::vector<int64_t>>{{1, 2}, {}});
  auto nested_back = round_trip(nested);
  EXPECT_TRUE(values_equal(nested_back, nested));
  // The outer list is List[Any]: c10's IValue::to cannot cast it, ivalue_convert (value_as) can.
  EXPECT_EQ(from_ivalue<std::vector<std::vector<int64_t>>>(nested_back), (std::vector<std::vector<int64_t>>{{1, 2}, {}}));
  EXPECT_EQ(encode(to_ivalue(std::vector<int64_t>{})).bytes, std::string("\x07\x01", 2) + le32(0));
}

TEST(ValueCodec, DictsKeyedByStrIntOrTensorKeepTheirOrder) {
  c10::Dict<std::string, at::Tensor> by_name;
  by_name.insert("z", torch::ones({1}));
  by_name.insert("a", torch::zeros({2}));
  auto back = round_trip(IValue(by_name));
  ASSERT_TRUE(values_equal(back, IValue(by_name)));
  EXPECT_EQ(back.toGenericDict().begin()->key().toStringRef(), "z");
  auto typed = from_ivalue<c10::Dict<std::string, at::Tensor>>(back);
  EXPECT_TRUE(typed.at("a").equal(torch::zeros({2})));

  c10::Dict<at::Tensor, at::Tensor> grads;  // the shape of dist autograd's get_gradients
  auto w = torch::ones({2});
  grads.insert(w, torch::full({2}, 8.0));
  auto e = encode(IValue(grads));
  auto grads_back = from_ivalue<c10::Dict<at::Tensor, at::Tensor>>(decode(e.bytes, e.tensors));
  EXPECT_TRUE(grads_back.at(w).equal(torch::full({2}, 8.0)));

  c10::impl::GenericDict by_int(c10::IntType::get(), c10::AnyType::get());
  by_int.insert(IValue(int64_t(3)), IValue("three"));
  EXPECT_TRUE(values_equal(round_trip(IValue(by_int)), IValue(by_int)));

  c10::impl::GenericDict by_float(c10::FloatType::get(), c10::AnyType::get());
  by_float.insert(IValue(1.0), IValue());
  EXPECT_THROW(encode(IValue(by_float)), InputError);
}

TEST(ValueCodec, NestingIsLimitedTo64Levels) {
  IValue v(int64_t(1));
  for (int i = 0; i < kMaxNestingDepth; ++i) v = c10::ivalue::Tuple::create({v});
  EXPECT_TRUE(values_equal(round_trip(v), v));
  IValue deeper = c10::ivalue::Tuple::create({v});
  EXPECT_THROW(encode(deeper), InputError);
  std::string bytes;
  for (int i = 0; i <= kMaxNestingDepth; ++i) bytes += "\x08" + le32(1);
  bytes += std::string(1, '\0');
  EXPECT_EQ(decode_error(bytes), "rpc payload from worker7: values nested deeper than 64 levels");
}

TEST(ValueCodec, ValuesOutsideTheCodecAreInputErrorsNamingTheirType) {
  try {
    encode(IValue(c10::Device(c10::kCPU)));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rpc: value of type Device cannot be sent", 0), 0u) << e.what();
  }
  EXPECT_THROW(encode(IValue(c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get()))), InputError);
}

TEST(ValueCodec, EveryCorruptInputIsOneLineNamingTheSource) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "ends after 0 bytes inside a 1-byte field"},
      {"\x0b", "unknown value tag 11"},
      {"\x03\x01\x02", "ends after 3 bytes inside a 8-byte field"},
      {"\x05" + le32(0xd0000000u) + "abc", "a length of 3489660928 bytes exceeds the 3 bytes left"},
      {"\x06" + le32(0), "tensor index 0 but the message carries 0 tensors"},
      {std::string("\x07\x01", 2) + le32(1000000), "a list of 1000000 elements in 0 bytes"},
      {std::string("\x07\x09", 2) + le32(0), "unknown list element kind 9"},
      {std::string("\x07\x01", 2) + le32(1) + "\x05" + le32(0), "element 0 of a List[int] is str"},
      {"\x08" + le32(4) + std::string(2, '\0'), "a tuple of 4 elements in 2 bytes"},
      {std::string("\x09\x02", 2) + le32(0), "dict key kind 2 (expected 1 int, 4 Tensor or 5 str)"},
      {std::string("\x09\x05", 2) + le32(2) + "\x05" + le32(1) + "k" + std::string(1, '\0') + "\x05" + le32(1) +
           "k" + std::string(1, '\0'),
       "dict key 1 repeats"},
      {std::string("\x09\x05", 2) + le32(1) + "\x03" + le64(1) + std::string(1, '\0'),
       "key 0 of a Dict[str, Any] is int"},
      {std::string("\x0a", 1) + std::string(24, '\0'), "carries an RRef, which this process does not accept"},
      {std::string("\x00\x00", 2), "1 unexpected trailing bytes"},
  };
  for (const auto& [bytes, expected] : cases) {
    auto error = decode_error(bytes);
    EXPECT_EQ(error.rfind("rpc payload from worker7: ", 0), 0u) << error;
    EXPECT_NE(error.find(expected), std::string::npos) << "[" << error << "], expected [" << expected << "]";
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(RpcWire, RequestsAndResponsesRoundTrip) {
  std::vector<at::Tensor> tensors;
  Request request{RequestKind::Call, "ps.push", {IValue(int64_t(3)), IValue(torch::ones({2}))}};
  auto bytes = encode_request(request, tensors);
  EXPECT_EQ(bytes.substr(0, 4), "CTR1");
  auto back = decode_request(bytes, tensors, "worker1");
  EXPECT_EQ(back.function, "ps.push");
  ASSERT_EQ(back.args.size(), 2u);
  EXPECT_EQ(back.args[0].toInt(), 3);
  EXPECT_TRUE(back.args[1].toTensor().is_same(tensors[0]));

  std::vector<at::Tensor> none;
  Response failed{ResponseStatus::Exception, {}, "worker1", "boom"};
  auto r = decode_response(encode_response(failed, none), none, "worker1");
  EXPECT_EQ(r.status, ResponseStatus::Exception);
  EXPECT_EQ(r.worker, "worker1");
  EXPECT_EQ(r.message, "boom");
  Response ok{ResponseStatus::Ok, IValue("fine"), "worker1", ""};
  EXPECT_EQ(decode_response(encode_response(ok, none), none, "worker1").value.toStringRef(), "fine");
}

TEST(RpcWire, MalformedEnvelopesAreOneLineInputErrors) {
  std::vector<at::Tensor> none;
  auto request_error = [&](const std::string& bytes) -> std::string {
    try {
      decode_request(bytes, none, "worker1");
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  // A pickled Python UDF starts with the pickle protocol byte, not the magic.
  EXPECT_NE(request_error("\x80\x02rest").find("rpc payload from worker1: not a ctitan RPC payload"), std::string::npos);
  EXPECT_NE(request_error("CTR1\x07").find("unknown request kind 7"), std::string::npos);
  const std::string call = std::string("CTR1") + char(1);
  const std::string name_f = std::string(1, char(1)) + std::string(1, '\0') + "f";  // u16 length 1, "f"
  EXPECT_NE(request_error(call + char(3) + std::string(1, '\0') + "a b" + "\x08" + le32(0)).find("has a character outside"),
            std::string::npos);
  EXPECT_NE(request_error(call + name_f + "\x03" + le64(1)).find("the arguments are a int, not a tuple"),
            std::string::npos);
  EXPECT_NE(request_error(call + name_f + "\x08" + le32(0) + "x").find("1 unexpected trailing bytes"),
            std::string::npos);
  EXPECT_EQ(request_error(call + name_f + "\x08" + le32(0)), "no error");
  try {
    decode_response("CTR1\x09", none, "worker1");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "rpc payload from worker1: unknown response status 9");
  }
}

TEST(RpcWire, FunctionNamesAreValidated) {
  EXPECT_NO_THROW(validate_function_name("ctitan.dist_optim:step-2"));
  EXPECT_THROW(validate_function_name(""), InputError);
  EXPECT_THROW(validate_function_name(std::string(257, 'a')), InputError);
  EXPECT_NO_THROW(validate_function_name(std::string(256, 'a')));
  try {
    validate_function_name("bad name");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "rpc: function name 'bad name' has a character outside [A-Za-z0-9_.:-]");
  }
}

TEST(RpcConvert, MismatchesNameWhatWasExpectedAndWhatCame) {
  auto error = [](auto convert) -> std::string {
    try {
      convert();
    } catch (const ArgumentError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error([] { from_ivalue<at::Tensor>(IValue(int64_t(2)), "argument 2"); }),
            "argument 2 expected Tensor, got int");
  EXPECT_EQ(error([] { from_ivalue<std::vector<double>>(to_ivalue(std::vector<std::string>{"a"}), "x"); }),
            "x expected List[float], got List[str]");
  EXPECT_EQ(error([] { from_ivalue<std::optional<std::string>>(IValue(1.5), "y"); }),
            "y expected Optional[str], got float");
  EXPECT_EQ(error([] { from_ivalue<std::tuple<int64_t, std::string>>(to_ivalue(std::make_tuple(int64_t(1))), "t"); }),
            "t expected Tuple[int, str], got Tuple[int]");
  // Python's rule: an int is accepted for a float.
  EXPECT_EQ(from_ivalue<double>(IValue(int64_t(3))), 3.0);
  EXPECT_FALSE(from_ivalue<std::optional<int64_t>>(IValue()).has_value());
}

TEST(RpcRegistry, HandlersConvertArgumentsAndReportMismatches) {
  register_function("registry_test.scale", [](const at::Tensor& x, double s) { return x * s; });
  const Handler* scale = find_function("registry_test.scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(find_function("registry_test.missing"), nullptr);
  auto y = (*scale)({IValue(torch::ones({2})), IValue(int64_t(3))}).toTensor();
  EXPECT_TRUE(y.equal(torch::full({2}, 3.0)));
  try {
    (*scale)({IValue(torch::ones({2})), IValue("three")});
    FAIL() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_STREQ(e.what(), "argument 2 expected float, got str");
  }
  try {
    (*scale)({IValue(torch::ones({2}))});
    FAIL() << "no error";
  } catch (const ArgumentError& e) {
    EXPECT_STREQ(e.what(), "expected 2 arguments, got 1");
  }
  EXPECT_THROW(register_function("registry_test.scale", [] {}), std::logic_error);
  EXPECT_THROW(register_function("registry test", [] {}), InputError);
  auto names = registered_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "registry_test.scale"), names.end());
}

CTITAN_RPC_FUNCTION("registry_test.static", [](int64_t a, int64_t b) { return a * 10 + b; });

TEST(RpcRegistry, StaticRegistrationRunsAtProgramStart) {
  const Handler* f = find_function("registry_test.static");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ((*f)({IValue(int64_t(4)), IValue(int64_t(2))}).toInt(), 42);
}

TEST(RpcRegistry, AFunctionReturningAFutureIsAsynchronous) {
  Future pending;
  register_function("registry_test.later", [pending] { return pending; });
  register_function("registry_test.nothing", [] {});
  auto result = (*find_function("registry_test.later"))({});
  ASSERT_TRUE(result.isFuture());
  EXPECT_FALSE(result.toFuture()->completed());
  pending.set_value(IValue(int64_t(5)));
  EXPECT_EQ(result.toFuture()->value().toInt(), 5);
  EXPECT_TRUE((*find_function("registry_test.nothing"))({}).isNone());
}

TEST(RpcFuture, ThenSeesValuesAndErrors) {
  Future first;
  auto doubled = first.then([](const Future& f) { return f.value_as<int64_t>() * 2; });
  auto described = doubled.then([](const Future& f) { return std::to_string(f.value_as<int64_t>()); });
  EXPECT_FALSE(described.completed());
  first.set_value(IValue(int64_t(21)));
  EXPECT_EQ(described.value_as<std::string>(), "42");

  Future failing;
  auto after = failing.then([](const Future& f) { return f.value_as<int64_t>() + 1; });
  failing.set_error(std::make_exception_ptr(RpcError(RpcErrorKind::Timeout, "rpc to w 'f' ran for more than 1 s")));
  try {
    after.wait();
    FAIL() << "no error";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.kind(), RpcErrorKind::Timeout);
    EXPECT_STREQ(e.what(), "rpc to w 'f' ran for more than 1 s");
  }
  Future wrong;
  wrong.set_value(IValue("text"));
  EXPECT_THROW(wrong.value_as<int64_t>(), ArgumentError);
}

TEST(RpcErrors, MessagesAreOneLineNamingWorkerAndFunction) {
  EXPECT_EQ(message::timeout("worker1", "sleep", 0.3), "rpc to worker1 'sleep' ran for more than 0.3 s");
  EXPECT_EQ(message::remote("worker1", "fail", "boom"), "rpc to worker1 'fail' failed on worker1: boom");
  EXPECT_EQ(message::unknown_function("worker1", "nope"), "rpc to worker1: no function 'nope' is registered there");
  EXPECT_EQ(message::bad_arguments("worker1", "add", "argument 2 expected Tensor, got int"),
            "rpc to worker1 'add': argument 2 expected Tensor, got int");
  EXPECT_EQ(message::peer_lost("worker1", "add", "eof"), "rpc to worker1 'add' failed: connection to worker1 lost (eof)");
  EXPECT_EQ(message::after_shutdown("add"), "rpc 'add' after shutdown");
}

}  // namespace
}  // namespace ctitan::rpc
