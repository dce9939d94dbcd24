#include "ir/attention_path.h"

#include <algorithm>

#include "ir/type_rules.h"

namespace fusec {

std::string attentionSimtReason(const Op& att) {
  const Type& q = att.operands[0]->type;
  const Type& k = att.operands[1]->type;
  const int r = q.rank();
  const int64_t D = q.shape.back(), DV = att.operands[2]->type.shape.back();
  const int64_t Tq = q.shape[size_t(r - 2)], Tk = k.shape[size_t(r - 2)];
  if (q.dtype != DType::bf16 && q.dtype != DType::f32) return "dtype " + std::string(dtypeName(q.dtype)) + " is not bf16 or f32";
  if (D != DV) return "d != dv";
  if (D % 16 != 0 || D > 128) return "d is not a multiple of 16 up to 128";
  if (!(att.attrFloat("scale") > 0)) return "the scale is not positive";
  if ((std::max(Tq, Tk) + 63) / 64 > 65535) return "more than 65535 row tiles (the mma grid's y)";
  return "";
}

bool attentionRowsAligned(const StridedView& view, const Shape& s, int64_t bytes, bool rowsAreLast) {
  const int64_t vec = std::max<int64_t>(1, 16 / bytes);  // elements per 16 bytes
  const int r = int(s.size());
  const int batchDims = rowsAreLast ? r - 1 : r - 2;
  if (view.offset % vec != 0) return false;
  if (!rowsAreLast && s[size_t(r - 2)] != 1 && view.strides[size_t(r - 2)] % vec != 0) return false;
  for (int d = 0; d < batchDims; ++d)
    if (s[size_t(d)] != 1 && view.strides[size_t(d)] % vec != 0) return false;
  return true;
}

std::string attentionTensorCoreBlocker(const Op& att) {
  std::string why = attentionSimtReason(att);
  if (!why.empty()) return why;
  const char* names[] = {"q", "k", "v", "o", "do", "lse"};
  for (size_t i = 0; i < std::min<size_t>(att.operands.size(), 5); ++i) {
    const Value* v = att.operands[i];
    auto view = resolveView(v);
    if (!view || !attentionRowsAligned(*view, v->type.shape, int64_t(dtypeBytes(v->type.dtype)), false))
      return std::string(names[i]) + "'s rows are not 16-byte aligned";
  }
  return "";
}

}  // namespace fusec
