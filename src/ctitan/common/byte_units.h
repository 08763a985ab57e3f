#pragma once
// The GiB for sizes in messages and estimates: one definition, so that files compiled together
// in a unity batch do not define their own twice.

namespace ctitan {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace ctitan
