#pragma once
// The value codec of ctitan's RPC payloads: c10::IValue <-> bytes + a tensor table
// (docs/design/rpc.md, decisions 3 and 4). Tensors never enter the bytes: each is an index into
// the table, which the agent sends as separate buffers. Decoding checks every length against the
// bytes remaining before it allocates, so a corrupt payload is one InputError line, never a
// large allocation or a crash.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ctitan::rpc {

// Tags of the encoded values (one byte each). A value is its tag, then, little-endian: Int i64;
// Double f64; String u32 length, bytes; Tensor u32 table index; List u8 ElementKind, u32 n, n
// values; Tuple u32 n, n values; Dict u8 key ElementKind, u32 n, n (key, value) pairs; RRef the
// RRefFields below in order (i16 i16 i64 i16 i64 i16). None, False and True have no body.
enum class ValueTag : uint8_t {
  None = 0, False = 1, True = 2, Int = 3, Double = 4, String = 5, Tensor = 6, List = 7, Tuple = 8,
  Dict = 9, RRef = 10,
};
// Element kind of an encoded list (and key kind of a dict: Int, Tensor or Str), so that decoding
// rebuilds a typed c10::List and IValue::to<std::vector<T>> works.
enum class ElementKind : uint8_t { Any = 0, Int = 1, Double = 2, Bool = 3, Tensor = 4, Str = 5 };

constexpr int kMaxNestingDepth = 64;

// The fields that identify an RRef fork on the wire (upstream's RRefForkData).
struct RRefFields {
  int16_t owner = 0;
  int16_t rref_on = 0;
  int64_t rref_local = 0;
  int16_t fork_on = 0;
  int64_t fork_local = 0;
  int16_t parent = 0;
};

// How RRefs cross the codec. The running agent's hook (rref_codec.h) drives upstream's fork
// protocol; RejectRRefs (the default, and the fuzz target's) refuses them.
class RRefCodecHook {
 public:
  virtual ~RRefCodecHook() = default;
  virtual RRefFields encode(const c10::IValue& rref) const = 0;
  virtual c10::IValue decode(const RRefFields& fields, const std::string& source) const = 0;
};

class RejectRRefs : public RRefCodecHook {
 public:
  RRefFields encode(const c10::IValue& rref) const override;
  c10::IValue decode(const RRefFields& fields, const std::string& source) const override;
};
const RRefCodecHook& reject_rrefs();

// Appends little-endian values to a byte string.
class ByteWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(char(v)); }
  void u16(uint16_t v) { raw(&v, sizeof v); }
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void i16(int16_t v) { raw(&v, sizeof v); }
  void i64(int64_t v) { raw(&v, sizeof v); }
  void f64(double v) { raw(&v, sizeof v); }
  void bytes(std::string_view s) { bytes_.append(s); }
  std::string take() { return std::move(bytes_); }
  const std::string& str() const { return bytes_; }

 private:
  void raw(const void* p, size_t n);  // host order is little-endian on every platform ctitan builds for
  std::string bytes_;
};

// Reads little-endian values, each checked against the bytes remaining. Every failure is an
// InputError "rpc payload from <source>: <what>".
class ByteReader {
 public:
  ByteReader(std::string_view bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {}
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  int16_t i16();
  int64_t i64();
  double f64();
  std::string_view bytes(size_t n);
  size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& what) const;
  void expect_end() const;

 private:
  void raw(void* out, size_t n);
  std::string_view bytes_;
  size_t pos_ = 0;
  std::string source_;
};

// Appends `value` to `out`, its tensors to `tensors`. A value the codec cannot carry (a device,
// an object, a future...) is an InputError naming its type.
void encode_value(const c10::IValue& value, ByteWriter& out, std::vector<at::Tensor>& tensors,
                  const RRefCodecHook& hook = reject_rrefs());

// Reads one value; tensor indices refer to `tensors`.
c10::IValue decode_value(ByteReader& in, const std::vector<at::Tensor>& tensors,
                         const RRefCodecHook& hook = reject_rrefs());

// Equal as the codec sees values: same kinds (list element and dict key types included), doubles
// bitwise, tensors by dtype, shape and bytes (not storage or strides), dicts in order (their value
// types are not compared: a decoded dict holds Any).
bool values_equal(const c10::IValue& a, const c10::IValue& b);

// "Tensor", "int", "List[int]", "Dict[str, Any]"...: the type names the error messages use.
std::string value_type_name(const c10::IValue& value);

}  // namespace ctitan::rpc
