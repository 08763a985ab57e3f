#include "ctitan/rpc/value_codec.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "ctitan/common/error.h"

namespace ctitan::rpc {

RRefFields RejectRRefs::encode(const c10::IValue&) const {
  throw InputError("rpc: an RRef cannot be encoded here (only a running RPC agent's codec carries RRefs)");
}
c10::IValue RejectRRefs::decode(const RRefFields&, const std::string& source) const {
  throw InputError(fmt::format("rpc payload from {}: carries an RRef, which this process does not accept", source));
}
const RRefCodecHook& reject_rrefs() {
  static const RejectRRefs hook;
  return hook;
}

void ByteWriter::raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }

void ByteReader::fail(const std::string& what) const {
  throw InputError(fmt::format("rpc payload from {}: {}", source_, what));
}
void ByteReader::raw(void* out, size_t n) {
  if (n > remaining()) fail(fmt::format("ends after {} bytes inside a {}-byte field", bytes_.size(), n));
  std::memcpy(out, bytes_.data() + pos_, n);
  pos_ += n;
}
uint8_t ByteReader::u8() { uint8_t v; raw(&v, sizeof v); return v; }
uint16_t ByteReader::u16() { uint16_t v; raw(&v, sizeof v); return v; }
uint32_t ByteReader::u32() { uint32_t v; raw(&v, sizeof v); return v; }
int16_t ByteReader::i16() { int16_t v; raw(&v, sizeof v); return v; }
int64_t ByteReader::i64() { int64_t v; raw(&v, sizeof v); return v; }
double ByteReader::f64() { double v; raw(&v, sizeof v); return v; }
std::string_view ByteReader::bytes(size_t n) {
  if (n > remaining()) fail(fmt::format("a length of {} bytes exceeds the {} bytes left", n, remaining()));
  auto out = bytes_.substr(pos_, n);
  pos_ += n;
  return out;
}
void ByteReader::expect_end() const {
  if (remaining() != 0) fail(fmt::format("{} unexpected trailing bytes", remaining()));
}

// An RRef's own type is upstream's RRef[PyObject] (rref_codec.cpp says why): just "RRef" in messages.
std::string value_type_name(const c10::IValue& value) {
  return value.isRRef() ? "RRef" : value.type()->annotation_str();
}

bool values_equal(const c10::IValue& a, const c10::IValue& b) {
  if (a.isNone() || a.isBool() || a.isInt() || a.isString()) {
    if (a.isNone()) return b.isNone();
    if (a.isBool()) return b.isBool() && a.toBool() == b.toBool();
    if (a.isInt()) return b.isInt() && a.toInt() == b.toInt();
    return b.isString() && a.toStringRef() == b.toStringRef();
  }
  if (a.isDouble()) {
    if (!b.isDouble()) return false;
    double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (a.isTensor()) {
    if (!b.isTensor()) return false;
    const auto& x = a.toTensor();
    const auto& y = b.toTensor();
    if (x.defined() != y.defined()) return false;
    if (!x.defined()) return true;
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes()) return false;
    // Bytes, not values: NaNs compare equal to themselves, and -0.0 differs from 0.0.
    if (x.numel() == 0) return true;
    auto cx = x.contiguous(), cy = y.contiguous();
    return std::memcmp(cx.data_ptr(), cy.data_ptr(), cx.numel() * cx.element_size()) == 0;
  }
  if (a.isList()) {
    if (!b.isList()) return false;
    auto x = a.toList(), y = b.toList();
    if (*x.elementType() != *y.elementType() || x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!values_equal(x.get(i), y.get(i))) return false;
    }
    return true;
  }
  if (a.isTuple()) {
    if (!b.isTuple()) return false;
    const auto& x = a.toTupleRef().elements();
    const auto& y = b.toTupleRef().elements();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!values_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.isGenericDict()) {
    if (!b.isGenericDict()) return false;
    auto x = a.toGenericDict(), y = b.toGenericDict();
    if (*x.keyType() != *y.keyType() || x.size() != y.size()) return false;
    for (auto i = x.begin(), j = y.begin(); i != x.end(); ++i, ++j) {
      if (!values_equal(i->key(), j->key()) || !values_equal(i->value(), j->value())) return false;
    }
    return true;
  }
  return false;  // RRefs and values the codec does not carry
}

namespace {

ElementKind element_kind(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::IntType: return ElementKind::Int;
    case c10::TypeKind::FloatType: return ElementKind::Double;
    case c10::TypeKind::BoolType: return ElementKind::Bool;
    case c10::TypeKind::TensorType: return ElementKind::Tensor;
    case c10::TypeKind::StringType: return ElementKind::Str;
    default: return ElementKind::Any;
  }
}

const char* element_kind_name(ElementKind kind) {
  switch (kind) {
    case ElementKind::Int: return "int";
    case ElementKind::Double: return "float";
    case ElementKind::Bool: return "bool";
    case ElementKind::Tensor: return "Tensor";
    case ElementKind::Str: return "str";
    case ElementKind::Any: return "Any";
  }
  return "?";
}

c10::TypePtr element_type(ElementKind kind) {
  switch (kind) {
    case ElementKind::Int: return c10::IntType::get();
    case ElementKind::Double: return c10::FloatType::get();
    case ElementKind::Bool: return c10::BoolType::get();
    case ElementKind::Tensor: return c10::TensorType::get();
    case ElementKind::Str: return c10::StringType::get();
    case ElementKind::Any: return c10::AnyType::get();
  }
  return c10::AnyType::get();
}

bool has_kind(const c10::IValue& v, ElementKind kind) {
  switch (kind) {
    case ElementKind::Int: return v.isInt();
    case ElementKind::Double: return v.isDouble();
    case ElementKind::Bool: return v.isBool();
    case ElementKind::Tensor: return v.isTensor();
    case ElementKind::Str: return v.isString();
    case ElementKind::Any: return true;
  }
  return false;
}

uint32_t count_u32(size_t n, const c10::IValue& value) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw InputError(fmt::format("rpc: a {} of {} elements or bytes is too large to send", value_type_name(value), n));
  }
  return uint32_t(n);
}

void encode(const c10::IValue& v, ByteWriter& out, std::vector<at::Tensor>& tensors, const RRefCodecHook& hook,
            int depth) {
  if (depth > kMaxNestingDepth) {
    throw InputError(fmt::format("rpc: a value nested deeper than {} levels cannot be sent", kMaxNestingDepth));
  }
  if (v.isNone()) {
    out.u8(uint8_t(ValueTag::None));
  } else if (v.isBool()) {
    out.u8(uint8_t(v.toBool() ? ValueTag::True : ValueTag::False));
  } else if (v.isInt()) {
    out.u8(uint8_t(ValueTag::Int));
    out.i64(v.toInt());
  } else if (v.isDouble()) {
    out.u8(uint8_t(ValueTag::Double));
    out.f64(v.toDouble());
  } else if (v.isString()) {
    const auto& s = v.toStringRef();
    out.u8(uint8_t(ValueTag::String));
    out.u32(count_u32(s.size(), v));
    out.bytes(s);
  } else if (v.isTensor()) {
    if (!v.toTensor().defined()) throw InputError("rpc: an undefined tensor cannot be sent");
    out.u8(uint8_t(ValueTag::Tensor));
    out.u32(count_u32(tensors.size(), v));
    tensors.push_back(v.toTensor());
  } else if (v.isList()) {
    auto list = v.toList();
    out.u8(uint8_t(ValueTag::List));
    out.u8(uint8_t(element_kind(list.elementType())));
    out.u32(count_u32(list.size(), v));
    for (const c10::IValue& e : list) encode(e, out, tensors, hook, depth + 1);
  } else if (v.isTuple()) {
    const auto& elements = v.toTupleRef().elements();
    out.u8(uint8_t(ValueTag::Tuple));
    out.u32(count_u32(elements.size(), v));
    for (const auto& e : elements) encode(e, out, tensors, hook, depth + 1);
  } else if (v.isGenericDict()) {
    auto dict = v.toGenericDict();
    auto key_kind = element_kind(dict.keyType());
    if (key_kind != ElementKind::Int && key_kind != ElementKind::Str && key_kind != ElementKind::Tensor) {
      throw InputError(fmt::format("rpc: a {} cannot be sent: dict keys must be str, int or Tensor",
                                   value_type_name(v)));
    }
    out.u8(uint8_t(ValueTag::Dict));
    out.u8(uint8_t(key_kind));
    out.u32(count_u32(dict.size(), v));
    for (const auto& entry : dict) {
      encode(entry.key(), out, tensors, hook, depth + 1);
      encode(entry.value(), out, tensors, hook, depth + 1);
    }
  } else if (v.isRRef()) {
    auto f = hook.encode(v);
    out.u8(uint8_t(ValueTag::RRef));
    out.i16(f.owner);
    out.i16(f.rref_on);
    out.i64(f.rref_local);
    out.i16(f.fork_on);
    out.i64(f.fork_local);
    out.i16(f.parent);
  } else if (v.isCapsule() || v.isObject()) {
    throw InputError(fmt::format("rpc: value of type {} cannot leave its owner; call a function on the owner instead",
                                 value_type_name(v)));
  } else {
    throw InputError(fmt::format("rpc: value of type {} cannot be sent (the codec carries None, bool, int, float, "
                                 "str, Tensor and lists, tuples and dicts of them)",
                                 value_type_name(v)));
  }
}

c10::IValue decode(ByteReader& in, const std::vector<at::Tensor>& tensors, const RRefCodecHook& hook, int depth) {
  if (depth > kMaxNestingDepth) in.fail(fmt::format("values nested deeper than {} levels", kMaxNestingDepth));
  const uint8_t tag = in.u8();
  switch (ValueTag(tag)) {
    case ValueTag::None: return c10::IValue();
    case ValueTag::False: return c10::IValue(false);
    case ValueTag::True: return c10::IValue(true);
    case ValueTag::Int: return c10::IValue(in.i64());
    case ValueTag::Double: return c10::IValue(in.f64());
    case ValueTag::String: {
      const uint32_t n = in.u32();
      return c10::IValue(std::string(in.bytes(n)));
    }
    case ValueTag::Tensor: {
      const uint32_t index = in.u32();
      if (index >= tensors.size()) {
        in.fail(fmt::format("tensor index {} but the message carries {} tensors", index, tensors.size()));
      }
      return c10::IValue(tensors[index]);
    }
    case ValueTag::List: {
      const uint8_t kind_byte = in.u8();
      if (kind_byte > uint8_t(ElementKind::Str)) in.fail(fmt::format("unknown list element kind {}", kind_byte));
      const auto kind = ElementKind(kind_byte);
      const uint32_t n = in.u32();
      // Every element takes at least one byte: a count beyond the bytes left is corrupt, and
      // checking it first bounds the reservation below by the payload's size.
      if (n > in.remaining()) in.fail(fmt::format("a list of {} elements in {} bytes", n, in.remaining()));
      c10::impl::GenericList list(element_type(kind));
      list.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        auto e = decode(in, tensors, hook, depth + 1);
        if (!has_kind(e, kind)) {
          in.fail(fmt::format("element {} of a List[{}] is {}", i, element_kind_name(kind), value_type_name(e)));
        }
        list.push_back(std::move(e));
      }
      return c10::IValue(std::move(list));
    }
    case ValueTag::Tuple: {
      const uint32_t n = in.u32();
      if (n > in.remaining()) in.fail(fmt::format("a tuple of {} elements in {} bytes", n, in.remaining()));
      std::vector<c10::IValue> elements;
      elements.reserve(n);
      for (uint32_t i = 0; i < n; ++i) elements.push_back(decode(in, tensors, hook, depth + 1));
      return c10::IValue(c10::ivalue::Tuple::create(std::move(elements)));
    }
    case ValueTag::Dict: {
      const uint8_t kind_byte = in.u8();
      const auto key_kind = ElementKind(kind_byte);
      if (key_kind != ElementKind::Int && key_kind != ElementKind::Str && key_kind != ElementKind::Tensor) {
        in.fail(fmt::format("dict key kind {} (expected 1 int, 4 Tensor or 5 str)", kind_byte));
      }
      const uint32_t n = in.u32();
      if (n > in.remaining() / 2) in.fail(fmt::format("a dict of {} entries in {} bytes", n, in.remaining()));
      c10::impl::GenericDict dict(element_type(key_kind), c10::AnyType::get());
      dict.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        auto key = decode(in, tensors, hook, depth + 1);
        if (!has_kind(key, key_kind)) {
          in.fail(fmt::format("key {} of a Dict[{}, Any] is {}", i, element_kind_name(key_kind), value_type_name(key)));
        }
        auto value = decode(in, tensors, hook, depth + 1);
        if (!dict.insert(std::move(key), std::move(value)).second) in.fail(fmt::format("dict key {} repeats", i));
      }
      return c10::IValue(std::move(dict));
    }
    case ValueTag::RRef: {
      RRefFields f;
      f.owner = in.i16();
      f.rref_on = in.i16();
      f.rref_local = in.i64();
      f.fork_on = in.i16();
      f.fork_local = in.i64();
      f.parent = in.i16();
      return hook.decode(f, in.source());
    }
  }
  in.fail(fmt::format("unknown value tag {}", tag));
}

}  // namespace

void encode_value(const c10::IValue& value, ByteWriter& out, std::vector<at::Tensor>& tensors,
                  const RRefCodecHook& hook) {
  encode(value, out, tensors, hook, 0);
}

c10::IValue decode_value(ByteReader& in, const std::vector<at::Tensor>& tensors, const RRefCodecHook& hook) {
  return decode(in, tensors, hook, 0);
}

}  // namespace ctitan::rpc
