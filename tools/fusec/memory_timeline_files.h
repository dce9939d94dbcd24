// `fusec compile --memory-timeline FILE`: the memory plan's timeline (passes/memory_timeline.h)
// drawn as an SVG (FILE.svg: boxes over live ranges, hover titles, the peak, the resident
// bands, the layer marks) or written as JSON for scripts (FILE.json: the same data).
#pragma once
#include <string>

#include "passes/memory_timeline.h"

namespace fusec::cli {

std::string memoryTimelineSvg(const MemoryTimeline& t, const std::string& title);
std::string memoryTimelineJson(const MemoryTimeline& t, const std::string& title);

// Writes `t` to `path` atomically, SVG or JSON by its extension; Error for another extension.
void writeMemoryTimeline(const std::string& path, const MemoryTimeline& t, const std::string& title);

}  // namespace fusec::cli
