// Device functions a kernel's text may call, defined once and prepended to the sources that
// call them: the code that writes a call marks its writer (KernelBuilder::use), and generate.cpp
// prepends what was marked, so no other source changes when a helper is added.
#pragma once
#include <optional>
#include <string>

#include "ir/op_table.h"

namespace fusec::codegen {

enum class Helper {
  VectorIO,  // fusec_vload / fusec_vload_packed / fusec_vstore (codegen/vector_io.h)
  Philox,    // fusec_uniform (ir/philox.h): the interpreter's random numbers, as CUDA
  RowShared,  // fusec_words_put / fusec_words_get (codegen/vector_io.h): a row staged in shared memory
};
constexpr int kHelpers = 3;

// The helper a pointwise op's scalar formula (ir/ops.def) calls, if any.
std::optional<Helper> helperOf(OpKind k);
// Its CUDA source.
std::string helperSource(Helper h);

}  // namespace fusec::codegen
