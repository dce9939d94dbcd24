// The memory plan as a timeline (`fusec compile --memory-timeline FILE.svg|FILE.json`): what
// PyTorch's memory snapshot viewer shows for a step, read off the plan instead of a run.
//   x: the position in the schedule (g.ops, in order), drawn by launch;
//   y: the byte offset; the arena (scratch of one call) at the bottom, the resident region
//      (weights, AdamW moments, bf16 copies, inputs) above it as bands that span every x;
//   a box per arena value over its live range (passes/liveness.h), coloured by what it is:
//      saved       computed in the forward, read by the backward (activations kept);
//      temporary   computed and dead within the forward (or in a program with no backward);
//      gradient    computed in the backward (activation and weight gradients);
//      optimizer   computed from the optimizer's state or step count (AdamW's scalars).
// Layers and phases come from launchPlaces (passes/launch_stats.h): a mark at the first
// launch of each (forward|backward, layer) run, and at the optimizer's first launch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec {

enum class MemoryKind { Saved, Temporary, Gradient, Optimizer };
const char* memoryKindName(MemoryKind k);  // "saved", "temporary", "gradient", "optimizer"

struct MemoryBox {
  std::string name;      // the value's name, or %N as the printer numbers it
  std::string producer;  // the op that writes it: a kernel's name, "matmul", or the op kind
  int64_t offset = 0, bytes = 0;  // in the arena (bytes: the buffer's, 256-aligned)
  int def = 0, lastUse = 0;       // positions in g.ops, inclusive
  MemoryKind kind = MemoryKind::Temporary;
};

struct ResidentBand {
  std::string label;  // "weights", "AdamW moments", "bf16 copies", "buffers", "inputs"
  int64_t bytes = 0;  // all the params or inputs of that kind (their layout interleaves them)
};

struct PhaseMark {
  int at = 0;         // position in g.ops of the first launch of the run
  std::string label;  // "L3" (forward of layer 3), "L3 bwd", "outside", "outside bwd", "optimizer"
};

struct MemoryTimeline {
  std::vector<MemoryBox> boxes;  // one per arena buffer, in definition order
  std::vector<ResidentBand> resident;
  std::vector<PhaseMark> marks;
  int positions = 0;             // g.ops.size()
  // Per position, the launches before it (x is drawn by launch: the params and views that
  // fill the schedule's first hundreds of positions take no time); size positions + 1.
  std::vector<int> launchesBefore;
  int64_t arenaBytes = 0, residentBytes = 0;
  int peakAt = 0;                // the position where the live arena bytes are highest
  int64_t peakLiveBytes = 0;     // those bytes (the arena's lower bound)
};

// The timeline of `g`'s memory plan. Error (one line) when memory-plan has not run (an arena
// value without an offset): the timeline shows a plan, never makes one.
MemoryTimeline memoryTimeline(const Graph& g);

}  // namespace fusec
