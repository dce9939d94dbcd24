// safetensors reader and writer (see safetensors.h). The reader trusts nothing in the file:
// the header is bounded before it is read, parsed with duplicate-key detection, and every
// tensor's offsets are checked against its shape and against each other before any data is
// read; tensors are then read straight from the file, one at a time.
#include "frontend/safetensors.h"

#include "support/atomic_file.h"
#include "support/regular_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusec {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so must the host be");

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's bound
constexpr int kMaxJsonDepth = 16;                   // a valid header nests 3 deep

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F32", DType::f32}, {"BF16", DType::bf16}, {"F16", DType::f16},
                                 {"I64", DType::i64}, {"I32", DType::i32},   {"BOOL", DType::boolean}};

const char* safetensorsName(DType d) {
  for (auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

// One line, whatever the source text held.
std::string oneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

[[noreturn]] void fail(const std::string& what, const std::string& msg) { throw Error(what + ": " + oneLine(msg)); }

// ---------------------------------------------------------------------------------------
// Element conversion

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  float mag = exp == 0 ? std::ldexp(float(mant), -24) : std::ldexp(float(mant | 0x400), int(exp) - 25);
  return sign ? -mag : mag;
}

// `x` rounded to f16 first, so the encoding below is exact.
uint16_t floatToHalf(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  if (std::isnan(x)) return uint16_t(sign | 0x7e00 | ((u >> 13) & 0x3ff));
  float r = std::fabs(roundToF16(x));
  if (std::isinf(r)) return uint16_t(sign | 0x7c00);
  if (r == 0) return sign;
  if (r < std::ldexp(1.0f, -14)) return uint16_t(sign | uint16_t(std::ldexp(r, 24)));  // subnormal
  int e = std::ilogb(r);
  uint16_t mant = uint16_t(std::ldexp(r, 10 - e) - 1024);
  return uint16_t(sign | uint16_t((e + 15) << 10) | mant);
}

uint16_t floatToBF16Bits(float x) { return uint16_t(std::bit_cast<uint32_t>(roundToBF16(x)) >> 16); }

template <class T>
T loadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Decodes `bytes` (exactly numel * itemsize of them) into `t`.
void decode(const std::string& what, const std::string& name, const char* bytes, HostTensor& t) {
  size_t n = t.size();
  if (n == 0) {  // no bytes (and possibly no buffer: memcpy from null is UB even for 0 bytes)
    t.f.clear();
    t.i.clear();
    return;
  }
  switch (t.type.dtype) {
    case DType::f32:
      t.f.resize(n);
      std::memcpy(t.f.data(), bytes, n * 4);
      break;
    case DType::bf16:
      t.f.resize(n);
      for (size_t k = 0; k < n; ++k) t.f[k] = std::bit_cast<float>(uint32_t(loadLE<uint16_t>(bytes + 2 * k)) << 16);
      break;
    case DType::f16:
      t.f.resize(n);
      for (size_t k = 0; k < n; ++k) t.f[k] = halfToFloat(loadLE<uint16_t>(bytes + 2 * k));
      break;
    case DType::i64:
      t.i.resize(n);
      std::memcpy(t.i.data(), bytes, n * 8);
      break;
    case DType::i32:
      t.i.resize(n);
      for (size_t k = 0; k < n; ++k) t.i[k] = loadLE<int32_t>(bytes + 4 * k);
      break;
    case DType::boolean:
      t.i.resize(n);
      for (size_t k = 0; k < n; ++k) {
        uint8_t b = uint8_t(bytes[k]);
        if (b > 1)
          fail(what, "tensor '" + name + "': BOOL element " + std::to_string(k) + " is byte " + std::to_string(b) +
                         ", not 0 or 1");
        t.i[k] = b;
      }
      break;
  }
}

// Appends the bytes of `t` to `out`.
void encode(const std::string& what, const std::string& name, const HostTensor& t, std::string& out) {
  size_t n = t.size();
  bool fl = isFloat(t.type.dtype);
  if ((fl ? t.f.size() : t.i.size()) != n)
    fail(what, "tensor '" + name + "' of type " + t.type.str() + " holds " +
                   std::to_string(fl ? t.f.size() : t.i.size()) + " values");
  size_t at = out.size();
  out.resize(at + n * size_t(dtypeBytes(t.type.dtype)));
  char* p = out.data() + at;
  for (size_t k = 0; k < n; ++k) {
    switch (t.type.dtype) {
      case DType::f32: std::memcpy(p + 4 * k, &t.f[k], 4); break;
      case DType::bf16: { uint16_t b = floatToBF16Bits(t.f[k]); std::memcpy(p + 2 * k, &b, 2); break; }
      case DType::f16: { uint16_t h = floatToHalf(t.f[k]); std::memcpy(p + 2 * k, &h, 2); break; }
      case DType::i64: std::memcpy(p + 8 * k, &t.i[k], 8); break;
      case DType::i32: {
        if (t.i[k] < std::numeric_limits<int32_t>::min() || t.i[k] > std::numeric_limits<int32_t>::max())
          fail(what, "tensor '" + name + "': i32 element " + std::to_string(k) + " = " + std::to_string(t.i[k]) +
                         " does not fit in 32 bits");
        int32_t v = int32_t(t.i[k]);
        std::memcpy(p + 4 * k, &v, 4);
        break;
      }
      case DType::boolean: p[k] = t.i[k] != 0 ? 1 : 0; break;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Header

// Nesting depth of the JSON text, strings skipped; bounds the parser's recursion.
int jsonDepth(std::string_view s) {
  int depth = 0, maxDepth = 0;
  bool inString = false;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (inString) {
      if (c == '\\') ++k;
      else if (c == '"') inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '{' || c == '[') {
      maxDepth = std::max(maxDepth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return maxDepth;
}

// Parses the header; duplicate keys in any object are an error (nlohmann keeps the last).
json parseHeader(const std::string& what, std::string_view text) {
  if (jsonDepth(text) > kMaxJsonDepth) fail(what, "bad JSON header: nested more than " + std::to_string(kMaxJsonDepth) + " deep");
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty() && duplicate.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json h;
  try {
    h = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    std::string msg = e.what();  // "[json.exception.parse_error.101] parse error at ..."
    if (msg.rfind("[json.exception.", 0) == 0 && msg.find("] ") != std::string::npos) msg = msg.substr(msg.find("] ") + 2);
    fail(what, "bad JSON header: " + msg);
  }
  if (!duplicate.empty()) fail(what, "duplicate name '" + duplicate + "' in the header");
  if (!h.is_object()) fail(what, "bad JSON header: not an object");
  return h;
}

struct Entry {
  std::string name;
  Type type;
  uint64_t begin = 0, end = 0;
};

Entry parseEntry(const std::string& what, const std::string& name, const json& j) {
  std::string tw = "tensor '" + name + "'";
  if (name.empty()) fail(what, "a tensor has an empty name");
  if (!j.is_object()) fail(what, tw + ": entry is not an object");
  for (auto& [k, v] : j.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets") fail(what, tw + ": unknown field '" + k + "'");
  if (!j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
    fail(what, tw + ": needs dtype, shape and data_offsets");
  Entry e;
  e.name = name;
  const json& dt = j["dtype"];
  if (!dt.is_string()) fail(what, tw + ": dtype is not a string");
  std::string dts = dt.get<std::string>();
  bool found = false;
  for (auto& d : kDTypes)
    if (dts == d.name) { e.type.dtype = d.dtype; found = true; }
  if (!found) fail(what, tw + ": unsupported dtype '" + dts + "' (fusec reads F32, BF16, F16, I64, I32, BOOL)");
  const json& sh = j["shape"];
  if (!sh.is_array()) fail(what, tw + ": shape is not an array");
  uint64_t numel = 1;
  for (auto& d : sh) {
    if (!d.is_number_unsigned()) fail(what, tw + ": shape entries must be non-negative integers");
    uint64_t v = d.get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, v, &numel) ||
        numel > uint64_t(std::numeric_limits<int64_t>::max()))
      fail(what, tw + ": shape " + oneLine(sh.dump()) + " overflows");
    e.type.shape.push_back(int64_t(v));
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, uint64_t(dtypeBytes(e.type.dtype)), &bytes) ||
      bytes > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(what, tw + ": shape " + oneLine(sh.dump()) + " overflows");
  const json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(what, tw + ": data_offsets must be two non-negative integers");
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) fail(what, tw + ": data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) + "] end before they begin");
  if (e.end - e.begin != bytes)
    fail(what, tw + ": data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) + "] hold " +
                   std::to_string(e.end - e.begin) + " bytes but " + std::string(dts) + shapeStr(e.type.shape) +
                   " needs " + std::to_string(bytes));
  return e;
}

// Reads `size` bytes at `offset` of the data buffer into `dst`.
using ReadFn = std::function<void(uint64_t offset, uint64_t size, char* dst)>;

Bindings parseBody(const std::string& what, std::string_view headerText, uint64_t bufferSize, const ReadFn& read,
                   SafetensorsMetadata* metadata) {
  json h = parseHeader(what, headerText);
  std::vector<Entry> entries;
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail(what, "__metadata__ is not an object");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) fail(what, "__metadata__ value of '" + k + "' is not a string");
        if (metadata) (*metadata)[k] = s.get<std::string>();
      }
      continue;
    }
    // A name is printed in messages and matched against parameter names: a control character
    // (a newline) is never part of one, and would split a one-line error in two.
    if (std::any_of(name.begin(), name.end(), [](char c) { return uint8_t(c) < 0x20 || c == 0x7f; }))
      fail(what, "tensor name '" + name + "' holds a control character");
    entries.push_back(parseEntry(what, name, v));
  }
  // The buffer must be indexed exactly: in offset order each tensor starts where the last
  // ended (no overlap, no hole) and the last ends at the end of the file.
  std::vector<const Entry*> order;
  for (auto& e : entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    auto range = [](const Entry* x) { return "[" + std::to_string(x->begin) + "," + std::to_string(x->end) + "]"; };
    if (e->end > bufferSize)
      fail(what, "truncated file: tensor '" + e->name + "': data_offsets " + range(e) + " run past the end of the " +
                     std::to_string(bufferSize) + "-byte data buffer");
    if (e->begin < at)
      fail(what, "tensor '" + e->name + "': data_offsets " + range(e) + " overlap tensor '" + prev->name + "' " +
                     range(prev));
    if (e->begin > at)
      fail(what, "tensor '" + e->name + "': data_offsets " + range(e) + " leave a hole at bytes [" +
                     std::to_string(at) + "," + std::to_string(e->begin) + "] of the data buffer");
    at = e->end;
    prev = e;
  }
  if (at != bufferSize)
    fail(what, "the data buffer has " + std::to_string(bufferSize - at) + " trailing bytes no tensor indexes");

  Bindings out;
  std::vector<char> bytes;
  for (auto& e : entries) {
    HostTensor t;
    t.type = e.type;
    bytes.resize(size_t(e.end - e.begin));
    if (!bytes.empty()) read(e.begin, e.end - e.begin, bytes.data());
    decode(what, e.name, bytes.data(), t);
    out.emplace(e.name, std::move(t));
  }
  return out;
}

uint64_t checkHeaderLength(const std::string& what, uint64_t total, const char* first8) {
  if (total < 8)
    fail(what, "truncated file: " + std::to_string(total) + " bytes, too short for the 8-byte header length");
  uint64_t n = loadLE<uint64_t>(first8);
  if (n > kMaxHeaderBytes)
    fail(what, "header length " + std::to_string(n) + " is absurd (more than 100 MB): not a safetensors file?");
  if (n > total - 8)
    fail(what, "truncated file: the header claims " + std::to_string(n) + " bytes but only " +
                   std::to_string(total - 8) + " follow the length");
  return n;
}

// ---------------------------------------------------------------------------------------
// Writing

void writeTo(std::ostream& os, const Bindings& tensors, const SafetensorsMetadata& metadata, const std::string& what) {
  json h = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t at = 0;
  for (auto& [name, t] : tensors) {
    if (name.empty()) fail(what, "cannot write a tensor with an empty name");
    if (name == "__metadata__") fail(what, "'__metadata__' is reserved and cannot name a tensor");
    uint64_t n = uint64_t(t.type.numel()) * uint64_t(dtypeBytes(t.type.dtype));
    h[name] = {{"dtype", safetensorsName(t.type.dtype)}, {"shape", t.type.shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  std::string header;
  try {
    header = h.dump();
  } catch (const json::exception& e) {  // invalid UTF-8 in a name
    fail(what, std::string("cannot write the header: ") + e.what());
  }
  header.append((8 - (header.size() % 8)) % 8, ' ');  // keeps the data 8-byte aligned
  uint64_t n = header.size();
  os.write(reinterpret_cast<const char*>(&n), 8);
  os.write(header.data(), std::streamsize(header.size()));
  std::string bytes;
  for (auto& [name, t] : tensors) {
    bytes.clear();
    encode(what, name, t, bytes);
    os.write(bytes.data(), std::streamsize(bytes.size()));
  }
}

}  // namespace

Bindings parseSafetensors(std::string_view bytes, const std::string& what, SafetensorsMetadata* metadata) {
  uint64_t n = checkHeaderLength(what, bytes.size(), bytes.data());
  std::string_view header = bytes.substr(8, size_t(n));
  std::string_view buffer = bytes.substr(8 + size_t(n));
  return parseBody(what, header, buffer.size(),
                   [&](uint64_t off, uint64_t size, char* dst) { std::memcpy(dst, buffer.data() + off, size_t(size)); },
                   metadata);
}

Bindings loadSafetensors(const std::string& path, SafetensorsMetadata* metadata) {
  const int fd = openRegularFile(path);  // never blocks on a named pipe
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) throw Error("cannot read '" + path + "': cannot tell its size");
  const uint64_t total = uint64_t(end);
  char first8[8] = {};
  if (!readAt(fd, 0, first8, size_t(std::min<uint64_t>(8, total)), path)) fail(path, "read error in the header");
  uint64_t n = checkHeaderLength(path, total, first8);
  std::string header(size_t(n), '\0');
  if (!readAt(fd, 8, header.data(), size_t(n), path)) fail(path, "the file shrank while it was read");
  uint64_t dataStart = 8 + n;
  auto read = [&](uint64_t off, uint64_t size, char* dst) {
    if (!readAt(fd, dataStart + off, dst, size_t(size), path)) fail(path, "the file shrank while it was read");
  };
  return parseBody(path, header, total - dataStart, read, metadata);
}

std::string serializeSafetensors(const Bindings& tensors, const SafetensorsMetadata& metadata, const std::string& what) {
  std::ostringstream os;
  writeTo(os, tensors, metadata, what);
  return std::move(os).str();
}

void requireFinite(const Bindings& tensors, const std::string& what, const std::set<std::string>& except) {
  for (const auto& [name, t] : tensors) {
    if (!isFloat(t.type.dtype) || except.count(name)) continue;
    for (size_t i = 0; i < t.f.size(); ++i)
      if (!std::isfinite(t.f[i])) {
        const char* kind = std::isnan(t.f[i]) ? "nan" : t.f[i] > 0 ? "inf" : "-inf";
        throw Error(what + ": tensor '" + name + "' holds " + kind + " at index " + std::to_string(i) + " (of " +
                    std::to_string(t.f.size()) + " values; --allow-nonfinite loads it anyway)");
      }
  }
}

void saveSafetensors(const std::string& path, const Bindings& tensors, const SafetensorsMetadata& metadata) {
  AtomicFile out(path);
  writeTo(out.stream(), tensors, metadata, path);
  out.commit();
}

}  // namespace fusec
