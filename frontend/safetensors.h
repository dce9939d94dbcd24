// safetensors I/O: the tensor file format PyTorch users already have (and that cannot run
// code when loaded, unlike pickle). Layout: an 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the byte buffer that the offsets index (relative to the buffer's start).
//
// Reading is strict: every malformed file (truncated, absurd header length, bad JSON,
// unknown dtype, offsets out of range / overlapping / leaving holes / not matching the
// shape, shape overflow, duplicate names) is a one-line Error that names the file.
// Writing is atomic (temp file in the same directory, then rename).
#pragma once
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "ir/host_tensor.h"

namespace fusec {

using SafetensorsMetadata = std::map<std::string, std::string>;

// Tensors by name. F32/BF16/F16 load into HostTensor::f, I64/I32/BOOL into HostTensor::i.
Bindings loadSafetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

// The same from bytes in memory; `what` names the source in error messages.
Bindings parseSafetensors(std::string_view bytes, const std::string& what,
                          SafetensorsMetadata* metadata = nullptr);

// Writes every tensor (sorted by name, contiguous, header padded to 8 bytes). Float values
// are rounded to their dtype (they normally already are); i32 values must fit in 32 bits.
void saveSafetensors(const std::string& path, const Bindings& tensors,
                     const SafetensorsMetadata& metadata = {});
// Refuses tensors holding NaN or +-Inf: Error "WHAT: tensor 'NAME' holds nan at index I
// (of N values; --allow-nonfinite loads it anyway)", the first such tensor by name; those
// named in `except` are not checked.
void requireFinite(const Bindings& tensors, const std::string& what, const std::set<std::string>& except = {});

std::string serializeSafetensors(const Bindings& tensors, const SafetensorsMetadata& metadata = {},
                                 const std::string& what = "<memory>");

}  // namespace fusec
