#include "ir/collectives.h"

namespace fusec {

const Value* inPlaceOperandOf(const Value* v) {
  if (!v->def || v->def->kind != OpKind::AllReduce) return nullptr;
  return v->def->operands.at(size_t(v->index));
}

}  // namespace fusec
