#pragma once
// How RRefs cross ctitan's payloads in a running process (docs/design/rpc.md, decision 11): the codec
// hook that drives upstream's fork protocol, and the two-pass encoding that keeps a payload that
// fails to encode from leaving a half-registered fork behind.
#include <string>
#include <utility>

#include "ctitan/rpc/value_codec.h"

namespace ctitan::rpc {

// Encoding an RRef registers a fork with upstream's RRefContext (a pending child on a user, an
// early fork on the owner); decoding one creates the receiver's UserRRef (or finds the OwnerRRef)
// and notifies the owner and the parent. Needs a running agent.
const RRefCodecHook& rref_protocol();

// Only counts the RRefs it sees; encodes placeholder fields.
class CountRRefs final : public RRefCodecHook {
 public:
  RRefFields encode(const c10::IValue&) const override {
    ++seen_;
    return {};
  }
  c10::IValue decode(const RRefFields&, const std::string&) const override;
  int seen() const { return seen_; }

 private:
  mutable int seen_ = 0;
};

// `encode(hook)` returns the payload (and must start its tensor table afresh on each call). The
// first pass only counts RRefs, so every other value has been checked before any fork exists;
// a payload that holds RRefs is encoded again with the fork protocol.
template <typename Encode>
std::string encode_forking(Encode&& encode) {
  CountRRefs probe;
  std::string bytes = encode(static_cast<const RRefCodecHook&>(probe));
  if (probe.seen() == 0) return bytes;
  return encode(rref_protocol());
}

}  // namespace ctitan::rpc
