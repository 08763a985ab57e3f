#pragma once
// C++ argument and result types <-> c10::IValue, with the type names that mismatch errors use.
// Supported: c10::IValue (anything), at::Tensor, bool, integers, double/float, std::string,
// std::vector<T>, std::optional<T>, std::tuple<T...>, c10::Dict<K, V>, and void results.
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ctitan/rpc/errors.h"
#include "ctitan/rpc/value_codec.h"

namespace ctitan::rpc {

template <typename T>
struct Convert;  // specialized below: type_name(), matches(v), from(v), to(x)

template <typename T>
using Plain = std::remove_cv_t<std::remove_reference_t<T>>;

// The type's name as the error messages spell it ("Tensor", "List[int]", "Optional[str]").
template <typename T>
std::string type_name() {
  return Convert<Plain<T>>::type_name();
}

template <typename T>
c10::IValue to_ivalue(T&& value) {
  if constexpr (std::is_array_v<std::remove_reference_t<T>> || std::is_pointer_v<Plain<T>>) {
    static_assert(std::is_convertible_v<T, const char*>, "rpc: the only pointers an argument may be are C strings");
    return c10::IValue(std::string(value));
  } else {
    return Convert<Plain<T>>::to(std::forward<T>(value));
  }
}

// The value as T; a mismatch throws ArgumentError "<what> expected <T>, got <actual>".
template <typename T>
T from_ivalue(const c10::IValue& value, const std::string& what = "value") {
  if (!Convert<T>::matches(value)) {
    throw ArgumentError(what + " expected " + type_name<T>() + ", got " + value_type_name(value));
  }
  return Convert<T>::from(value);
}

template <>
struct Convert<c10::IValue> {
  static std::string type_name() { return "Any"; }
  static bool matches(const c10::IValue&) { return true; }
  static c10::IValue from(const c10::IValue& v) { return v; }
  static c10::IValue to(c10::IValue v) { return v; }
};

template <>
struct Convert<at::Tensor> {
  static std::string type_name() { return "Tensor"; }
  static bool matches(const c10::IValue& v) { return v.isTensor(); }
  static at::Tensor from(const c10::IValue& v) { return v.toTensor(); }
  static c10::IValue to(at::Tensor v) { return c10::IValue(std::move(v)); }
};

template <>
struct Convert<bool> {
  static std::string type_name() { return "bool"; }
  static bool matches(const c10::IValue& v) { return v.isBool(); }
  static bool from(const c10::IValue& v) { return v.toBool(); }
  static c10::IValue to(bool v) { return c10::IValue(v); }
};

template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
struct Convert<T> {
  static std::string type_name() { return "int"; }
  static bool matches(const c10::IValue& v) { return v.isInt(); }
  static T from(const c10::IValue& v) { return static_cast<T>(v.toInt()); }
  static c10::IValue to(T v) { return c10::IValue(static_cast<int64_t>(v)); }
};

// An int is accepted where a float is expected, as Python does.
template <typename T>
  requires std::is_floating_point_v<T>
struct Convert<T> {
  static std::string type_name() { return "float"; }
  static bool matches(const c10::IValue& v) { return v.isDouble() || v.isInt(); }
  static T from(const c10::IValue& v) { return static_cast<T>(v.isInt() ? double(v.toInt()) : v.toDouble()); }
  static c10::IValue to(T v) { return c10::IValue(static_cast<double>(v)); }
};

template <>
struct Convert<std::string> {
  static std::string type_name() { return "str"; }
  static bool matches(const c10::IValue& v) { return v.isString(); }
  static std::string from(const c10::IValue& v) { return v.toStringRef(); }
  static c10::IValue to(std::string v) { return c10::IValue(std::move(v)); }
};

template <typename T>
struct Convert<std::optional<T>> {
  static std::string type_name() { return "Optional[" + Convert<T>::type_name() + "]"; }
  static bool matches(const c10::IValue& v) { return v.isNone() || Convert<T>::matches(v); }
  static std::optional<T> from(const c10::IValue& v) {
    if (v.isNone()) return std::nullopt;
    return Convert<T>::from(v);
  }
  static c10::IValue to(std::optional<T> v) { return v ? Convert<T>::to(std::move(*v)) : c10::IValue(); }
};

template <typename T>
struct Convert<std::vector<T>> {
  static std::string type_name() { return "List[" + Convert<T>::type_name() + "]"; }
  static bool matches(const c10::IValue& v) {
    if (!v.isList()) return false;
    for (const c10::IValue& e : v.toListRef()) {
      if (!Convert<T>::matches(e)) return false;
    }
    return true;
  }
  static std::vector<T> from(const c10::IValue& v) {
    std::vector<T> out;
    for (const c10::IValue& e : v.toListRef()) out.push_back(Convert<T>::from(e));
    return out;
  }
  // A typed c10::List where the element type has one (List[int], List[Tensor], ...), else List[Any].
  static c10::IValue to(std::vector<T> v) {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
                  std::is_same_v<T, at::Tensor> || std::is_same_v<T, std::string>) {
      c10::List<T> list;
      list.reserve(v.size());
      for (auto&& e : v) list.push_back(std::move(e));
      return c10::IValue(std::move(list));
    } else {
      c10::impl::GenericList list(c10::AnyType::get());
      list.reserve(v.size());
      for (auto&& e : v) list.push_back(Convert<T>::to(std::move(e)));
      return c10::IValue(std::move(list));
    }
  }
};

template <typename... T>
struct Convert<std::tuple<T...>> {
  static std::string type_name() {
    std::string names;
    ((names += (names.empty() ? "" : ", ") + Convert<T>::type_name()), ...);
    return "Tuple[" + names + "]";
  }
  static bool matches(const c10::IValue& v) {
    if (!v.isTuple() || v.toTupleRef().elements().size() != sizeof...(T)) return false;
    return matches_each(v.toTupleRef().elements(), std::index_sequence_for<T...>{});
  }
  static std::tuple<T...> from(const c10::IValue& v) { return from_each(v.toTupleRef().elements(), std::index_sequence_for<T...>{}); }
  static c10::IValue to(std::tuple<T...> v) {
    return std::apply([](auto&&... e) { return c10::IValue(c10::ivalue::Tuple::create({Convert<Plain<decltype(e)>>::to(std::move(e))...})); }, std::move(v));
  }

 private:
  template <size_t... I>
  static bool matches_each(c10::ArrayRef<c10::IValue> e, std::index_sequence<I...>) {
    return (Convert<T>::matches(e[I]) && ...);
  }
  template <size_t... I>
  static std::tuple<T...> from_each(c10::ArrayRef<c10::IValue> e, std::index_sequence<I...>) {
    return std::tuple<T...>(Convert<T>::from(e[I])...);
  }
};

// Decoded dicts are Dict[key, Any]; the typed dict is rebuilt entry by entry.
template <typename K, typename V>
struct Convert<c10::Dict<K, V>> {
  static std::string type_name() { return "Dict[" + Convert<K>::type_name() + ", " + Convert<V>::type_name() + "]"; }
  static bool matches(const c10::IValue& v) {
    if (!v.isGenericDict()) return false;
    for (const auto& entry : v.toGenericDict()) {
      if (!Convert<K>::matches(entry.key()) || !Convert<V>::matches(entry.value())) return false;
    }
    return true;
  }
  static c10::Dict<K, V> from(const c10::IValue& v) {
    c10::Dict<K, V> out = empty();
    for (const auto& entry : v.toGenericDict()) out.insert(Convert<K>::from(entry.key()), Convert<V>::from(entry.value()));
    return out;
  }
  static c10::IValue to(c10::Dict<K, V> v) { return c10::IValue(std::move(v)); }

 private:
  // c10 has no default constructor for Dict<K, IValue>: it needs the key type spelled out.
  static c10::Dict<K, V> empty() {
    if constexpr (std::is_same_v<V, c10::IValue>) {
      return c10::Dict<K, V>(c10::getTypePtr<K>(), c10::AnyType::get());
    } else {
      return c10::Dict<K, V>();
    }
  }
};

}  // namespace ctitan::rpc
