#include "bench/profile.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "bench/markdown.h"
#include "bench/trace.h"
#include "ir/collectives.h"
#include "ir/strided_view.h"
#include "passes/fusion/kernel_family.h"
#include "passes/launch_stats.h"
#include "ir/step_invariant.h"
#include "runtime/gemm_plan.h"
#include "support/ptr_hash.h"

namespace fusec::bench {

const char* categoryName(LaunchCategory c) {
  switch (c) {
    case LaunchCategory::Gemm: return "gemm";
    case LaunchCategory::Pointwise: return "pointwise";
    case LaunchCategory::RowReduce: return "row_reduce";
    case LaunchCategory::ColReduce: return "col_reduce";
    case LaunchCategory::Attention: return "attention";
    case LaunchCategory::Optimizer: return "optimizer";
    case LaunchCategory::Comm: return "comm";
    case LaunchCategory::Other: return "other";
  }
  return "?";
}

std::string kernelGroupName(const std::string& kernelName) {
  size_t start = 0;
  while (start <= kernelName.size()) {
    size_t end = kernelName.find('_', start);
    if (end == std::string::npos) end = kernelName.size();
    const bool digits = end > start && std::all_of(kernelName.begin() + long(start), kernelName.begin() + long(end),
                                                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (digits) return kernelName.substr(0, start) + "*" + kernelName.substr(end);
    start = end + 1;
  }
  return kernelName;
}

namespace {

// The value that owns `v`'s data: views share their source's storage, so a kernel reading a
// transpose of P reads P.
const Value* root(const Value* v) {
  while (v->def && isViewOp(v->def->kind) && !v->def->operands.empty()) v = v->def->operands[0];
  return v;
}

// What rt::Executable launches: kernels, GEMMs and collectives (not a shard, a view of rows).
bool isLaunch(const Op& op) { return op.kind == OpKind::Kernel || op.kind == OpKind::Matmul || communicates(op.kind); }

std::string gemmGroup(const Op& mm) {
  const rt::GemmPlan p = rt::planGemm(mm);
  const int64_t batch = p.batch * int64_t(p.launches.size());
  return "gemm " + std::to_string(p.M) + "x" + std::to_string(p.N) + "x" + std::to_string(p.K) +
         (batch > 1 ? " x" + std::to_string(batch) : "");
}

}  // namespace

std::vector<LaunchClass> classifyLaunches(const Graph& g) {
  // Pass 1: the attention kernels (softmax, and whatever reads its result).
  std::set<const Value*> softmaxOut, attnKernelOut, attnKernelIn;
  std::map<const Op*, KernelFamily> family;
  std::map<const Op*, std::string> hint;
  for (const auto& op : g.ops) {
    if (op->kind != OpKind::Kernel) continue;
    family[op.get()] = kernelFamily(*op);
    hint[op.get()] = kernelHintOf(*op);
    if (family[op.get()] == KernelFamily::RowReduce && hint[op.get()] == "softmax")
      for (const auto& r : op->results) softmaxOut.insert(r.get());
  }
  std::set<const Op*> attnKernels;
  for (const auto& op : g.ops) {
    if (op->kind != OpKind::Kernel) continue;
    bool attn = softmaxOut.count(op->result()) != 0;
    for (const Value* v : op->operands) attn |= softmaxOut.count(root(v)) != 0;
    if (!attn) continue;
    attnKernels.insert(op.get());
    for (const auto& r : op->results) attnKernelOut.insert(r.get());
    for (const Value* v : op->operands) attnKernelIn.insert(root(v));
  }

  const std::vector<LaunchPlace> places = launchPlaces(g);
  std::vector<LaunchClass> out;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const auto& op = g.ops[i];
    if (!isLaunch(*op)) continue;
    LaunchClass c;
    c.backward = places[i].backward;
    c.layer = places[i].layer;
    if (isCollective(op->kind)) {
      // The runtime names a collective by its size ("all_reduce 12 tensors, 9.4 MB"); the
      // profile keeps that name. No roofline: NCCL's rate is the links', not the copy ceiling.
      c.family = "comm";
      c.name = op->info().name;
      c.group = op->info().name;
      c.category = LaunchCategory::Comm;
      out.push_back(std::move(c));
      continue;
    }
    c.family = op->kind == OpKind::Kernel ? familyName(family.at(op.get())) : "gemm";
    c.traffic = launchTraffic(*op);
    if (op->kind == OpKind::Matmul) {
      c.gemm = true;
      const Value* r = op->result();
      // The runtime's name for a GEMM is its result value; unnamed ones are numbered there,
      // so the profile matches launches by position and keeps the runtime's name.
      c.name = r->name.empty() ? "matmul" : "%" + r->name;
      c.group = gemmGroup(*op);
      bool attn = attnKernelIn.count(r) != 0;
      for (const Value* v : op->operands) attn |= attnKernelOut.count(root(v)) != 0;
      c.category = attn ? LaunchCategory::Attention : LaunchCategory::Gemm;
      if (attn) c.group = "attention " + c.group;
    } else {
      const KernelFamily f = family.at(op.get());
      const std::string& h = hint.at(op.get());
      c.name = op->attrStr("name");
      c.group = kernelGroupName(c.name);
      if (attnKernels.count(op.get()) || f == KernelFamily::Attention) c.category = LaunchCategory::Attention;
      else if (f == KernelFamily::MultiTensor || h == "adamw" || h == "embedding_adamw") c.category = LaunchCategory::Optimizer;
      else if (f == KernelFamily::Pointwise) c.category = LaunchCategory::Pointwise;
      else if (f == KernelFamily::RowReduce) c.category = LaunchCategory::RowReduce;
      else if (f == KernelFamily::ColReduce) c.category = LaunchCategory::ColReduce;
      else c.category = LaunchCategory::Other;
    }
    // Computed at the first call only (passes/step_invariant.h): no time and no bytes a step.
    if (isStepInvariant(*op)) {
      c.group += " (once)";
      c.traffic = LaunchTraffic{};
    }
    out.push_back(std::move(c));
  }
  if (out.empty()) throw Error("the program has no launches (no GEMM and no kernel)");
  return out;
}

double ProgramProfile::totalMs() const {
  double s = 0;
  for (size_t i = 0; i < ms.size(); ++i)
    if (i >= launches.size() || launches[i].category != LaunchCategory::Comm) s += ms[i];
  return s;
}

double ProgramProfile::gemmMs() const {
  double s = 0;
  for (size_t i = 0; i < launches.size() && i < ms.size(); ++i)
    if (launches[i].gemm) s += ms[i];
  return s;
}

std::vector<double> medianPerLaunch(const std::vector<std::vector<float>>& runs) {
  if (runs.empty()) throw Error("no timed runs");
  std::vector<double> out(runs[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> xs;
    for (const auto& r : runs) {
      if (r.size() != out.size()) throw Error("internal: timed runs of different lengths");
      xs.push_back(r[i]);
    }
    std::sort(xs.begin(), xs.end());
    const size_t n = xs.size();
    out[i] = n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
  }
  return out;
}

namespace {

void checkAligned(const ProgramProfile& p) {
  if (p.ms.size() != p.launches.size())
    throw Error("internal: " + std::to_string(p.ms.size()) + " launch times for " + std::to_string(p.launches.size()) +
                " launches");
}

// Rows keyed by `keyOf`, shares of the program's total, sorted by time unless `order` is given.
template <class KeyOf>
std::vector<ProfileRow> aggregate(const ProgramProfile& p, KeyOf keyOf) {
  checkAligned(p);
  std::map<std::string, ProfileRow> rows;
  std::vector<std::string> firstSeen;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const std::string key = keyOf(p.launches[i]);
    auto [it, fresh] = rows.try_emplace(key);
    if (fresh) firstSeen.push_back(key);
    it->second.key = key;
    it->second.category = categoryName(p.launches[i].category);
    it->second.count++;
    it->second.ms += p.ms[i];
    it->second.bytes += p.launches[i].traffic.bytes();
    it->second.flops += p.launches[i].traffic.flops;
    if (p.ceilings.bf16Tflops > 0 || p.ceilings.copyGBps > 0) {
      const LaunchTraffic& t = p.launches[i].traffic;
      const double rate = p.ceilings.tflops(t.gemmDtype == DType::bf16);
      it->second.gemmFloorMs += floorMs(0, t.flops, 0, rate);
      it->second.floorMs += floorMs(t.bytes(), t.flops, p.ceilings.copyGBps, rate);
    }
  }
  const double total = p.totalMs();
  std::vector<ProfileRow> out;
  for (const auto& k : firstSeen) {
    ProfileRow r = rows.at(k);
    r.share = total > 0 ? r.ms / total : 0;
    out.push_back(r);
  }
  return out;
}

std::string groupKey(const LaunchClass& c) { return c.group + (c.backward ? " (bwd)" : ""); }

void sortByTime(std::vector<ProfileRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
}

}  // namespace

RooflineFigures rooflineFigures(const ProfileRow& r, const Ceilings& c) {
  RooflineFigures f;
  if (r.ms <= 0) return f;
  const double seconds = r.ms * 1e-3;
  f.gbps = double(r.bytes) / seconds / 1e9;
  f.tflops = double(r.flops) / seconds / 1e12;
  if (c.copyGBps > 0) f.copyPct = 100 * f.gbps / c.copyGBps;
  f.gemmPct = 100 * r.gemmFloorMs / r.ms;
  f.floorPct = 100 * r.floorMs / r.ms;
  return f;
}

std::vector<ProfileRow> byCategory(const ProgramProfile& p) {
  std::vector<ProfileRow> seen = aggregate(p, [](const LaunchClass& c) { return std::string(categoryName(c.category)); });
  std::vector<ProfileRow> out;
  for (int i = 0; i < kNumCategories; ++i) {
    const std::string name = categoryName(LaunchCategory(i));
    auto it = std::find_if(seen.begin(), seen.end(), [&](const ProfileRow& r) { return r.key == name; });
    ProfileRow r;
    r.key = r.category = name;
    out.push_back(it == seen.end() ? r : *it);
  }
  return out;
}

std::vector<ProfileRow> byKernel(const ProgramProfile& p) {
  std::vector<ProfileRow> rows = aggregate(p, groupKey);
  sortByTime(rows);
  return rows;
}

std::vector<ProfileRow> topNonGemm(const ProgramProfile& p, size_t n) {
  ProgramProfile kernels;
  kernels.ceilings = p.ceilings;
  for (size_t i = 0; i < p.launches.size() && i < p.ms.size(); ++i)
    if (!p.launches[i].gemm) kernels.launches.push_back(p.launches[i]), kernels.ms.push_back(p.ms[i]);
  if (kernels.launches.empty()) return {};
  std::vector<ProfileRow> rows = aggregate(kernels, groupKey);
  // Shares stay of the whole program, not of its kernels.
  const double total = p.totalMs();
  for (auto& r : rows) r.share = total > 0 ? r.ms / total : 0;
  sortByTime(rows);
  if (rows.size() > n) rows.resize(n);
  return rows;
}

namespace {

std::string fmt(const char* f, double x) { return formatNumber(f, x); }



bool haveCeilings(const Ceilings& c) { return c.copyGBps > 0 && c.bf16Tflops > 0 && c.f32Tflops > 0; }

std::string rowsTable(const char* keyHead, const std::vector<ProfileRow>& rows, bool withCategory, const Ceilings& ceil) {
  const bool roof = haveCeilings(ceil);
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    std::vector<std::string> c = {r.key};
    if (withCategory) c.push_back(r.category);
    c.insert(c.end(), {std::to_string(r.count), fmt("%.3f", r.ms), fmt("%.1f%%", 100 * r.share)});
    const RooflineFigures f = rooflineFigures(r, ceil);
    c.insert(c.end(), {fmt("%.1f", double(r.bytes) / 1e6), fmt("%.0f", f.gbps)});
    if (roof) c.push_back(fmt("%.0f%%", f.copyPct));
    c.push_back(r.flops ? fmt("%.1f", f.tflops) : "");
    if (roof) c.insert(c.end(), {r.flops ? fmt("%.0f%%", f.gemmPct) : "", fmt("%.0f%%", f.floorPct)});
    cells.push_back(c);
  }
  std::vector<std::string> head = {keyHead};
  if (withCategory) head.push_back("Category");
  head.insert(head.end(), {"Launches", "Total (ms)", "Share", "MB moved", "GB/s"});
  if (roof) head.push_back("% copy");
  head.push_back("TFLOP/s");
  if (roof) head.insert(head.end(), {"% GEMM", "% floor"});
  return markdownTable(head, cells);
}

nlohmann::ordered_json rowsJson(const std::vector<ProfileRow>& rows, const Ceilings& ceil) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  const bool roof = haveCeilings(ceil);
  for (const auto& r : rows) {
    const RooflineFigures f = rooflineFigures(r, ceil);
    nlohmann::ordered_json o = {{"name", r.key}, {"category", r.category}, {"count", r.count}, {"ms", r.ms},
                                {"share", r.share}, {"bytes", r.bytes},   {"gbps", f.gbps},   {"flops", r.flops},
                                {"tflops", f.tflops}};
    if (roof) {
      o["copy_pct"] = f.copyPct;
      o["gemm_pct"] = r.flops ? nlohmann::ordered_json(f.gemmPct) : nlohmann::ordered_json(nullptr);
      o["floor_ms"] = r.floorMs;
      o["floor_pct"] = f.floorPct;
    }
    a.push_back(o);
  }
  return a;
}

double gemmShare(const ProgramProfile& p) { return p.totalMs() > 0 ? p.gemmMs() / p.totalMs() : 0; }

std::string shareLine(const std::vector<ProgramProfile>& programs) {
  std::string s = "GEMM share of launch time (all GEMMs, attention's included):";
  for (const auto& p : programs) s += " " + p.program + " " + fmt("%.1f%%", 100 * gemmShare(p)) + ";";
  if (programs.size() == 1) s += " (only " + programs[0].program + " was profiled)";
  else s.pop_back();
  return s + "\n";
}

}  // namespace

std::string timingDescription(const std::vector<ProgramProfile>& programs) {
  bool kernels = false, events = false;
  for (const auto& p : programs) (p.kernelTimes ? kernels : events) = true;
  std::string s;
  if (kernels) s = "kernel durations on the device (CUPTI) in the step's CUDA graph";
  if (kernels && events) s += " for some programs, ";
  if (events) s += "CUDA events around each launch, launched one by one";
  return s;
}

std::string formatProfile(const std::string& header, const std::vector<ProgramProfile>& programs, Format format) {
  if (format == Format::Csv) throw Error("fusec profile prints table or json, not csv");
  for (const auto& p : programs) checkAligned(p);
  if (format == Format::Json) {
    nlohmann::ordered_json j;
    j["header"] = header;
    j["programs"] = nlohmann::ordered_json::array();
    for (const auto& p : programs) {
      nlohmann::ordered_json o;
      o["program"] = p.program;
      o["launches"] = p.launches.size();
      o["timing"] = p.kernelTimes ? "kernels" : "events";
      o["launch_sum_ms"] = p.totalMs();
      o["graph_ms"] = p.graphMs ? nlohmann::ordered_json(*p.graphMs) : nlohmann::ordered_json(nullptr);
      o["gemm_share"] = gemmShare(p);
      if (p.overlap)
        o["overlap"] = {{"ranks", p.ranks},
                        {"step_ms", p.overlap->stepMs},
                        {"compute_ms", p.overlap->computeMs},
                        {"comm_ms", p.overlap->commMs},
                        {"exposed_comm_ms", p.overlap->exposedCommMs},
                        {"exposed_share", p.overlap->stepMs > 0 ? p.overlap->exposedCommMs / p.overlap->stepMs : 0}};
      if (haveCeilings(p.ceilings))
        o["ceilings"] = {{"copy_gbps", p.ceilings.copyGBps},
                         {"gemm_bf16_tflops", p.ceilings.bf16Tflops},
                         {"gemm_f32_tflops", p.ceilings.f32Tflops}};
      o["categories"] = rowsJson(byCategory(p), p.ceilings);
      o["kernels"] = rowsJson(byKernel(p), p.ceilings);
      o["top_non_gemm"] = rowsJson(topNonGemm(p), p.ceilings);
      o["gemm_tuning"] = gemmTuningJson(p.gemmTuning);
      j["programs"].push_back(o);
    }
    return j.dump() + "\n";
  }
  std::string s = "# " + header + "\n";
  for (const auto& p : programs) {
    s += "\n## " + p.program + ": " + std::to_string(p.launches.size()) + " launches\n\n";
    if (haveCeilings(p.ceilings))
      s += "Ceilings measured in this run: copy " + fmt("%.0f GB/s", p.ceilings.copyGBps) + ", GEMM bf16 " +
           fmt("%.1f", p.ceilings.bf16Tflops) + " and f32 " + fmt("%.1f TFLOP/s", p.ceilings.f32Tflops) +
           ". MB moved: each operand read once, each result written once (bench/roofline.h); % floor: the time "
           "those bytes and FLOPs need at the ceilings over the time taken.\n\n";
    s += "### By category\n\n" + rowsTable("Category", byCategory(p), false, p.ceilings);
    s += "\n### By kernel (same kernel across layers; (bwd): backward launches)\n\n" +
         rowsTable("Kernel", byKernel(p), true, p.ceilings);
    s += "\n### Top 10 non-GEMM kernels\n\n" + rowsTable("Kernel", topNonGemm(p), true, p.ceilings);
    s += "\nSum of per-launch times: " + fmt("%.3f ms", p.totalMs());
    // Kernel durations leave out the time between kernels, which the whole step includes;
    // event times include a launch gap per launch, which the graph mostly saves.
    if (p.graphMs)
      s += "; whole step as one CUDA graph: " + fmt("%.3f ms", *p.graphMs) +
           (p.kernelTimes ? " (between kernels: " + fmt("%.3f ms", *p.graphMs - p.totalMs())
                          : " (launch overhead: " + fmt("%.3f ms", p.totalMs() - *p.graphMs)) +
           ")";
    if (p.overlap)
      s += "\nCollectives (comm, on their own stream, rank 0 of " + std::to_string(p.ranks) + "): " +
           overlapSummary(*p.overlap) + " in a replay of the step\n";
    s += "\n" + gemmTuningTable(p.gemmTuning);
  }
  s += "\n" + shareLine(programs);
  return s;
}

}  // namespace fusec::bench
