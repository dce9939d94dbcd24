#include "runtime/host_storage.h"

#include <cstring>

namespace fusec::rt {

namespace {

uint16_t halfBits(float x) {  // x already an f16 value: exact
  _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float fromHalfBits(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return float(h);
}

}  // namespace

size_t storageBytes(const Type& t) { return size_t(t.numel()) * size_t(dtypeBytes(t.dtype)); }

std::vector<uint8_t> toStorage(const HostTensor& t, DType storage) {
  const bool narrowing = storage != t.type.dtype;
  if (narrowing && !(t.type.dtype == DType::f32 && (storage == DType::bf16 || storage == DType::f16)))
    throw Error("cannot store a " + t.type.str() + " tensor as " + std::string(dtypeName(storage)));
  const size_t w = size_t(dtypeBytes(storage));
  std::vector<uint8_t> out(t.size() * w);
  // Same layout on both sides: one copy (billions of weights go through here).
  if (storage == DType::f32) {
    if (t.size()) std::memcpy(out.data(), t.f.data(), out.size());
    return out;
  }
  if (storage == DType::i64) {
    if (t.size()) std::memcpy(out.data(), t.i.data(), out.size());
    return out;
  }
  for (size_t k = 0; k < t.size(); ++k) {
    uint8_t* p = out.data() + k * w;
    switch (storage) {
      case DType::f32: std::memcpy(p, &t.f[k], 4); break;
      case DType::bf16: {  // a bf16 value's f32 bits end in 16 zeros: the top half is exact
        float x = roundToBF16(t.f[k]);
        uint32_t b;
        std::memcpy(&b, &x, 4);
        uint16_t h = uint16_t(b >> 16);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::f16: {
        uint16_t h = halfBits(roundToF16(t.f[k]));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::i64: std::memcpy(p, &t.i[k], 8); break;
      case DType::i32: {
        int32_t v = int32_t(t.i[k]);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::boolean: *p = t.i[k] ? 1 : 0; break;
    }
  }
  return out;
}

HostTensor fromStorage(const Type& type, const std::vector<uint8_t>& bytes) {
  HostTensor t = HostTensor::zeros(type);
  const size_t w = size_t(dtypeBytes(type.dtype));
  if (bytes.size() != t.size() * w) throw Error("internal: " + std::to_string(bytes.size()) + " bytes for " + type.str());
  if (type.dtype == DType::f32) {
    if (t.size()) std::memcpy(t.f.data(), bytes.data(), bytes.size());
    return t;
  }
  for (size_t k = 0; k < t.size(); ++k) {
    const uint8_t* p = bytes.data() + k * w;
    switch (type.dtype) {
      case DType::f32: std::memcpy(&t.f[k], p, 4); break;
      case DType::bf16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        uint32_t b = uint32_t(h) << 16;
        std::memcpy(&t.f[k], &b, 4);
        break;
      }
      case DType::f16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        t.f[k] = fromHalfBits(h);
        break;
      }
      case DType::i64: std::memcpy(&t.i[k], p, 8); break;
      case DType::i32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        t.i[k] = v;
        break;
      }
      case DType::boolean: t.i[k] = *p; break;
    }
  }
  return t;
}

}  // namespace fusec::rt
