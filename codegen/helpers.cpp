#include "codegen/helpers.h"

#include "codegen/vector_io.h"
#include "ir/philox.h"

namespace fusec::codegen {

std::optional<Helper> helperOf(OpKind k) {
  if (k == OpKind::Uniform) return Helper::Philox;
  return std::nullopt;
}

std::string helperSource(Helper h) {
  switch (h) {
    case Helper::VectorIO: return vectorPrelude();
    case Helper::Philox: return uniformDeviceSource();
    case Helper::RowShared: return rowSharedPrelude();
  }
  return "";
}

}  // namespace fusec::codegen
