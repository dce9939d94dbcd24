#include "bench/trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace fusec::bench {

namespace {

using Json = nlohmann::ordered_json;

// Track ids: one process for the host, one for the GPU, threads for its tracks.
constexpr int kHostPid = 1, kGpuPid = 2;
constexpr int kCompileTid = 1, kProgramTid = 1, kLaunchTid = 2, kGraphTid = 3;

Json metadata(const char* what, int pid, int tid, const std::string& name) {
  Json m = {{"name", what}, {"ph", "M"}, {"pid", pid}};
  if (tid) m["tid"] = tid;
  m["args"] = {{"name", name}};
  return m;
}

Json slice(const std::string& name, const char* cat, int pid, int tid, double tsUs, double durUs) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", tsUs}, {"dur", durUs}};
}

Json launchArgs(const LaunchClass& c, double ms) {
  Json a = {{"kernel", c.name},
            {"group", c.group},
            {"family", c.family},
            {"category", categoryName(c.category)},
            {"layer", c.layer},
            // AdamW's updates run inside the backward (each layer's when its gradients are ready):
            // their own phase, so that a trace shows where the optimizer runs.
            {"phase", c.category == LaunchCategory::Optimizer ? "optimizer" : c.backward ? "backward" : "forward"},
            {"bytes", c.traffic.bytes()},
            {"GB/s", ms > 0 ? double(c.traffic.bytes()) / (ms * 1e6) : 0.0},
            {"flops", c.traffic.flops}};
  if (c.traffic.flops) a["TFLOP/s"] = ms > 0 ? double(c.traffic.flops) / (ms * 1e9) : 0.0;
  return a;
}

}  // namespace

std::string chromeTrace(const std::string& header, const std::vector<ProgramProfile>& programs) {
  Json events = Json::array();
  events.push_back(metadata("process_name", kHostPid, 0, "host"));
  events.push_back(metadata("thread_name", kHostPid, kCompileTid, "compile (passes, NVRTC, first run)"));
  events.push_back(metadata("process_name", kGpuPid, 0, "GPU"));
  events.push_back(metadata("thread_name", kGpuPid, kProgramTid, "program"));
  events.push_back(metadata("thread_name", kGpuPid, kLaunchTid, "launches (median each: " + timingDescription(programs) + ")"));
  events.push_back(metadata("thread_name", kGpuPid, kGraphTid, "whole step as one CUDA graph (median)"));
  double t = 0;  // microseconds: each program after the previous one
  for (const ProgramProfile& p : programs) {
    if (p.ms.size() != p.launches.size())
      throw Error("internal: the trace of " + p.program + " has " + std::to_string(p.ms.size()) + " times for " +
                  std::to_string(p.launches.size()) + " launches");
    for (const HostPhase& h : p.host) {
      Json e = slice(h.name, "host", kHostPid, kCompileTid, t, h.ms * 1e3);
      e["args"] = {{"program", p.program}};
      events.push_back(std::move(e));
      t += h.ms * 1e3;
    }
    const double start = t;
    for (size_t i = 0; i < p.launches.size(); ++i) {
      const LaunchClass& c = p.launches[i];
      Json e = slice(c.gemm ? c.group : c.name, categoryName(c.category), kGpuPid, kLaunchTid, t, p.ms[i] * 1e3);
      e["args"] = launchArgs(c, p.ms[i]);
      events.push_back(std::move(e));
      t += p.ms[i] * 1e3;
    }
    Json prog = slice(p.program, "program", kGpuPid, kProgramTid, start, t - start);
    prog["args"] = {{"launches", p.launches.size()}, {"sum_of_launches_ms", p.totalMs()}};
    if (p.graphMs) prog["args"]["cuda_graph_ms"] = *p.graphMs;
    events.push_back(std::move(prog));
    if (p.graphMs) {
      Json g = slice(p.program + " (CUDA graph)", "graph", kGpuPid, kGraphTid, start, *p.graphMs * 1e3);
      g["args"] = {{"launches", p.launches.size()}, {"graph_minus_launch_sum_ms", *p.graphMs - p.totalMs()}};
      events.push_back(std::move(g));
    }
  }
  Json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"fusec", header}};
  return j.dump() + "\n";
}

std::string stepTimelineTrace(const std::string& header, const std::vector<rt::KernelSpan>& spans) {
  constexpr int kComputeTid = 1, kCommTid = 2;
  const rt::StepOverlap o = rt::stepOverlap(spans);
  Json events = Json::array();
  events.push_back(metadata("process_name", kGpuPid, 0, "GPU (one step, CUPTI)"));
  events.push_back(metadata("thread_name", kGpuPid, kComputeTid, "compute"));
  events.push_back(metadata("thread_name", kGpuPid, kCommTid, "collectives (NCCL)"));
  uint64_t first = UINT64_MAX;
  for (const rt::KernelSpan& k : spans) first = std::min(first, k.start);
  for (const rt::KernelSpan& k : spans) {
    Json e = slice(k.name.empty() ? "kernel" : k.name, k.comm ? "comm" : "compute", kGpuPid, k.comm ? kCommTid : kComputeTid,
                   double(k.start - first) * 1e-3, double(k.end - k.start) * 1e-3);
    e["args"] = {{"stream", k.stream}};
    events.push_back(std::move(e));
  }
  Json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"metadata",
               {{"fusec", header},
                {"step_ms", o.stepMs},
                {"compute_ms", o.computeMs},
                {"comm_ms", o.commMs},
                {"exposed_comm_ms", o.exposedCommMs}}}};
  return doc.dump(1) + "\n";
}

std::string overlapSummary(const rt::StepOverlap& o) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "step %.2f ms: compute %.2f ms, collectives %.2f ms, exposed %.2f ms (%.1f%% of the step)",
                o.stepMs, o.computeMs, o.commMs, o.exposedCommMs, o.stepMs > 0 ? 100.0 * o.exposedCommMs / o.stepMs : 0.0);
  return buf;
}

}  // namespace fusec::bench
