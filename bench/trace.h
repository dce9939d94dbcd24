// `fusec profile --trace FILE.json`: the profiled programs as a Chrome trace-event file, the
// format ui.perfetto.dev, chrome://tracing and torch.profiler.export_chrome_trace use
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU: complete
// events "ph":"X" with "ts"/"dur" in microseconds, and "M" metadata events naming the tracks).
//
// Tracks, one program after the other along the time axis:
//   host / compile       the program's host phases (trace, each pass, NVRTC and loading, the
//                        first run, where the GEMMs are tuned), back to back;
//   GPU / launches       one slice per launch, run launch by launch with CUDA events: its
//                        duration is its median time, its start the sum of the medians before
//                        it (the events are back to back, so the gap before the next launch
//                        counts in each). Arguments: kernel name, family, category, layer,
//                        phase (forward, backward, or optimizer: AdamW's updates, which run
//                        inside the backward), bytes, GB/s, FLOPs, TFLOP/s;
//   GPU / program        one slice per program spanning its launches;
//   GPU / CUDA graph     the whole step replayed as one CUDA graph (its median), beside the
//                        launches it replaces, for comparison.
#pragma once
#include <string>
#include <vector>

#include "bench/profile.h"
#include "runtime/kernel_spans.h"

namespace fusec::bench {

std::string chromeTrace(const std::string& header, const std::vector<ProgramProfile>& programs);

// One step as the device ran it (CUPTI, `fusec run --timeline`): a track for the compute
// stream's kernels and one for the collectives', at their recorded times from the step's first
// kernel, and the overlap (rt::stepOverlap) in the file's metadata.
std::string stepTimelineTrace(const std::string& header, const std::vector<rt::KernelSpan>& spans);

// "step 29.4 ms: compute 24.1 ms, collectives 6.2 ms, exposed 1.3 ms (4.4% of the step)".
std::string overlapSummary(const rt::StepOverlap& o);

}  // namespace fusec::bench
