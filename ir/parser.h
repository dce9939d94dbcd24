// Parses .fir text into a verified Module. Errors: Error("file:line:col: error: ...").
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fusec {

std::unique_ptr<Module> parseModule(std::string_view text, const std::string& sourceName = "<input>");
std::unique_ptr<Module> parseFile(const std::string& path);  // "-" reads stdin

}  // namespace fusec
