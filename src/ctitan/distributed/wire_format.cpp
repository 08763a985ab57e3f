#include "ctitan/distributed/wire_format.h"

#include <fmt/format.h>

#include "ctitan/distributed/comm_error.h"

namespace ctitan::distributed {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float";
    case at::kDouble: return "double";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "half";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    default: return c10::toString(t);
  }
}

void check_dtype(const char* collective, const at::Tensor& t) {
  if (!t.defined()) throw CommError(fmt::format("invalid collective: {} got an undefined tensor", collective));
  switch (t.scalar_type()) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf:
    case at::kLong: case at::kInt: case at::kChar: case at::kByte:
      return;
    default:
      throw CommError(fmt::format("invalid collective: {} does not support dtype {} (fp32, fp64, bf16, fp16, int64, "
                                  "int32, int8, uint8 are supported)", collective, dtype_name(t.scalar_type())));
  }
}

bool is_16bit_float(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

at::Tensor bits_view(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

at::Tensor reduction_wire(const at::Tensor& t) {
  if (is_16bit_float(t.scalar_type())) return at::empty(t.sizes(), t.options().dtype(at::kFloat)).copy_(t);
  return contiguous_wire(t);
}

at::Tensor contiguous_wire(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

void reduce_received_chunks(const at::Tensor& chunks, bool max, int64_t divisor, at::Tensor& output) {
  auto dtype = output.scalar_type();
  auto typed = chunks.scalar_type() == dtype ? chunks : chunks.view(dtype);
  if (output.is_contiguous() && !is_16bit_float(dtype)) {  // straight into the output: no temporary
    auto out = output.view({-1});
    if (max) {
      at::amax_out(out, typed, {0});
    } else {
      at::sum_out(out, typed, {0}, false, dtype);
    }
    if (divisor > 1) out.div_(divisor);
    return;
  }
  at::Tensor result = max ? typed.amax(0) : typed.sum(0, false, is_16bit_float(dtype) ? at::kFloat : dtype);
  if (divisor > 1) result.div_(divisor);
  output.copy_(result.view(output.sizes()));
}

}  // namespace ctitan::distributed
