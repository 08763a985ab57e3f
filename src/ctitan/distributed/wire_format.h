#pragma once
// How tensors travel through Gloo (gloo_backend.cpp). ctitan uses its own formats rather than
// Gloo's 16-bit ones, because they accumulate 16-bit floats in fp32:
// - moves without arithmetic (broadcast, all_gather, alltoall) carry bf16 as raw bits, viewed as
//   fp16 (same 2 bytes; Gloo only copies them), so the result is bit-exact;
// - reductions Gloo performs (all_reduce) get 16-bit floats upcast to fp32, reduced, rounded
//   back once: the same accuracy as an fp32 reduction, at twice the bytes on the wire;
// - reductions done locally (reduce_scatter's sum of received chunks) accumulate 16-bit floats
//   in fp32 and round once.
#include <ATen/ATen.h>

namespace ctitan::distributed {

// "float", "double", "bfloat16", "half", "int64", "int32", "int8", "uint8".
const char* dtype_name(at::ScalarType t);
// CommError unless the dtype is one the collectives support.
void check_dtype(const char* collective, const at::Tensor& t);
bool is_16bit_float(at::ScalarType t);

// `t` itself unless bf16, which is reinterpreted (no copy) as fp16 for Gloo's copies.
at::Tensor bits_view(const at::Tensor& t);
// What Gloo reduces in place of `t`: `t` itself when contiguous and Gloo can reduce its dtype,
// else a contiguous copy (fp32 for 16-bit floats) that the caller copies back after completion.
at::Tensor reduction_wire(const at::Tensor& t);
// `t` itself when contiguous, else a contiguous copy to be copied back.
at::Tensor contiguous_wire(const at::Tensor& t);

// chunks: (N, n), row j as received from rank j, possibly as bits (fp16 for bf16). Writes the sum
// (or max) over rows, divided by `divisor`, into `output` (n elements, any shape), in fp32 for
// 16-bit floats.
void reduce_received_chunks(const at::Tensor& chunks, bool max, int64_t divisor, at::Tensor& output);

}  // namespace ctitan::distributed
