#include "tools/fusec/memory_timeline_files.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/profile.h"
#include "support/atomic_file.h"

namespace fusec::cli {

namespace {

std::string escapeXml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string fmt(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Bytes as people read them: 1.50 GiB, 24.0 MiB, 512 B.
std::string humanBytes(int64_t b) {
  const double v = double(b);
  if (v >= double(1LL << 30)) return fmt(v / double(1LL << 30), 2) + " GiB";
  if (v >= double(1 << 20)) return fmt(v / double(1 << 20), 1) + " MiB";
  if (v >= 1024) return fmt(v / 1024, 1) + " KiB";
  return std::to_string(b) + " B";
}

const char* kindColour(MemoryKind k) {
  switch (k) {
    case MemoryKind::Saved: return "#4e79a7";
    case MemoryKind::Temporary: return "#bab0ac";
    case MemoryKind::Gradient: return "#e15759";
    case MemoryKind::Optimizer: return "#59a14f";
  }
  return "#000";
}

const char* bandColour(size_t i) {
  static const char* colours[] = {"#f28e2b", "#edc948", "#b07aa1", "#9c755f", "#76b7b2"};
  return colours[i % 5];
}

// The y axis: one unit for every tick (that of the largest value: GiB, MiB, KiB or B) and a
// round step in it (1, 2, 2.5 or 5 times a power of ten) for about `ticks` ticks over
// [0, span], so that they read 0, 0.25, 0.50 ... GiB, not 960.0 MiB, 1.25 GiB, 1.56 GiB.
struct Axis {
  double unitBytes = 1, step = 1;  // step in units
  const char* unit = "B";
  int decimals = 0;
};

Axis byteAxis(double span, int ticks) {
  Axis a;
  for (auto [bytes, name] : {std::pair{double(1LL << 30), "GiB"}, {double(1 << 20), "MiB"}, {1024.0, "KiB"}})
    if (span >= bytes) {
      a.unitBytes = bytes;
      a.unit = name;
      break;
    }
  const double raw = std::max(span / a.unitBytes / ticks, 1e-9);
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-9)) {
      a.step = m * p;
      break;
    }
  if (a.unitBytes == 1) a.step = std::max(1.0, std::round(a.step));  // whole bytes
  // Enough decimals to tell the ticks apart: 0.25 -> 2, 0.5 -> 1, 2 -> 0.
  for (a.decimals = 0; a.decimals < 4; ++a.decimals) {
    const double scaled = a.step * std::pow(10.0, a.decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6) break;
  }
  return a;
}

// The `n` largest planned values, largest first (ties: the earlier first): what the seeds asked
// of PyTorch's memory snapshot ("the largest allocations, and where they come from").
std::vector<const MemoryBox*> largest(const MemoryTimeline& t, size_t n) {
  std::vector<const MemoryBox*> v;
  for (const MemoryBox& b : t.boxes) v.push_back(&b);
  std::stable_sort(v.begin(), v.end(), [](const MemoryBox* a, const MemoryBox* b) { return a->bytes > b->bytes; });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace

std::string memoryTimelineSvg(const MemoryTimeline& t, const std::string& title) {
  // Plot area: x over the schedule, y over the arena (bottom) and the resident region (top).
  const double W = 1400, H = 820, left = 90, right = 230, top = 60, bottom = 110;
  const double pw = W - left - right, ph = H - top - bottom;
  const double total = double(std::max<int64_t>(1, t.arenaBytes + t.residentBytes));
  // x by launch: position p is drawn at the number of launches before it.
  const double launches = std::max(1, t.launchesBefore.back());
  auto X = [&](int pos) { return left + double(t.launchesBefore.at(size_t(std::min(pos, t.positions)))) / launches * pw; };
  auto Y = [&](double byte) { return top + ph - byte / total * ph; };

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(W, 0) + "\" height=\"" + fmt(H, 0) +
       "\" viewBox=\"0 0 " + fmt(W, 0) + " " + fmt(H, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>" + escapeXml(title) + "</title>\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fmt(left) + "\" y=\"28\" font-size=\"17\" font-weight=\"bold\">" + escapeXml(title) + "</text>\n";
  s += "<text x=\"" + fmt(left) + "\" y=\"47\" fill=\"#555\">arena " + humanBytes(t.arenaBytes) + " (one call's scratch), resident " +
       humanBytes(t.residentBytes) + "; " + std::to_string(t.boxes.size()) + " planned values over " +
       std::to_string(int(launches)) + " launches; hover a box for its value</text>\n";

  // The resident region: one band per kind, across the whole step.
  s += "<g class=\"resident\">\n";
  double at = double(t.arenaBytes);
  for (size_t i = 0; i < t.resident.size(); ++i) {
    const ResidentBand& b = t.resident[i];
    const double y0 = Y(at + double(b.bytes)), y1 = Y(at);
    s += "<rect class=\"band\" x=\"" + fmt(left) + "\" y=\"" + fmt(y0, 2) + "\" width=\"" + fmt(pw) + "\" height=\"" +
         fmt(std::max(0.5, y1 - y0), 2) + "\" fill=\"" + bandColour(i) + "\" fill-opacity=\"0.35\" data-label=\"" +
         escapeXml(b.label) + "\" data-bytes=\"" + std::to_string(b.bytes) + "\"><title>resident: " + escapeXml(b.label) +
         ", " + humanBytes(b.bytes) + "</title></rect>\n";
    if (y1 - y0 > 14)
      s += "<text x=\"" + fmt(left + 6) + "\" y=\"" + fmt((y0 + y1) / 2 + 4) + "\" fill=\"#333\">resident: " +
           escapeXml(b.label) + " (" + humanBytes(b.bytes) + ")</text>\n";
    at += double(b.bytes);
  }
  s += "</g>\n";
  s += "<line x1=\"" + fmt(left) + "\" x2=\"" + fmt(left + pw) + "\" y1=\"" + fmt(Y(double(t.arenaBytes)), 2) + "\" y2=\"" +
       fmt(Y(double(t.arenaBytes)), 2) + "\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>\n";

  // The arena's values, each over its live range (inclusive: an op's operands and results
  // coexist, so a box ends after its last use).
  s += "<g class=\"arena\">\n";
  for (const MemoryBox& b : t.boxes) {
    const double x0 = X(b.def), x1 = X(b.lastUse + 1);
    const double y0 = Y(double(b.offset + b.bytes)), y1 = Y(double(b.offset));
    s += "<rect class=\"value\" x=\"" + fmt(x0, 2) + "\" y=\"" + fmt(y0, 2) + "\" width=\"" + fmt(std::max(0.5, x1 - x0), 2) +
         "\" height=\"" + fmt(std::max(0.5, y1 - y0), 2) + "\" fill=\"" + kindColour(b.kind) +
         "\" stroke=\"white\" stroke-width=\"0.3\" data-name=\"" + escapeXml(b.name) + "\" data-kind=\"" +
         memoryKindName(b.kind) + "\" data-offset=\"" + std::to_string(b.offset) + "\" data-bytes=\"" +
         std::to_string(b.bytes) + "\" data-def=\"" + std::to_string(b.def) + "\" data-last=\"" +
         std::to_string(b.lastUse) + "\"><title>" + escapeXml(b.name) + " (" + memoryKindName(b.kind) + "): " +
         humanBytes(b.bytes) + " at arena offset " + std::to_string(b.offset) + ", written by " + escapeXml(b.producer) +
         ", live from launch " + std::to_string(t.launchesBefore.at(size_t(b.def))) + " to " +
         std::to_string(t.launchesBefore.at(size_t(std::min(b.lastUse, t.positions)))) + "</title></rect>\n";
  }
  s += "</g>\n";

  // The peak of the live arena bytes.
  const double px = (X(t.peakAt) + X(t.peakAt + 1)) / 2;
  s += "<line class=\"peak\" x1=\"" + fmt(px, 2) + "\" x2=\"" + fmt(px, 2) + "\" y1=\"" + fmt(top) + "\" y2=\"" + fmt(top + ph) +
       "\" stroke=\"black\" stroke-width=\"1.2\" stroke-dasharray=\"6 3\"/>\n";
  // The label on the side of the line with room for it.
  const bool leftOfLine = px > left + pw / 2;
  s += "<text x=\"" + fmt(leftOfLine ? px - 4 : px + 4) + "\" y=\"" + fmt(top + 14) + "\" text-anchor=\"" +
       (leftOfLine ? "end" : "start") + "\" font-weight=\"bold\">peak at launch " +
       std::to_string(t.launchesBefore.at(size_t(t.peakAt))) + ": " + humanBytes(t.peakLiveBytes) + " live + " + humanBytes(t.residentBytes) +
       " resident</text>\n";

  // Axes: bytes on y, the schedule on x with a mark where each layer's forward or backward
  // (or the optimizer) begins; labels are thinned where they would collide.
  s += "<rect x=\"" + fmt(left) + "\" y=\"" + fmt(top) + "\" width=\"" + fmt(pw) + "\" height=\"" + fmt(ph) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";
  const Axis axis = byteAxis(total, 8);
  for (int k = 0; k * axis.step * axis.unitBytes <= total * (1 + 1e-9); ++k) {
    const double units = k * axis.step;
    const double y = Y(units * axis.unitBytes);
    s += "<line x1=\"" + fmt(left - 5) + "\" x2=\"" + fmt(left) + "\" y1=\"" + fmt(y, 2) + "\" y2=\"" + fmt(y, 2) +
         "\" stroke=\"#333\"/><text class=\"tick\" x=\"" + fmt(left - 8) + "\" y=\"" + fmt(y + 4, 2) +
         "\" text-anchor=\"end\">" + fmt(units, axis.decimals) + " " + axis.unit + "</text>\n";
  }
  s += "<text transform=\"translate(18," + fmt(top + ph / 2) + ") rotate(-90)\" text-anchor=\"middle\">offset (arena below the dashed line, resident above)</text>\n";
  // Every mark gets its tick; labels that would collide are thinned, the layers' first (a
  // layer's forward or backward is what the reader looks for), then "outside" and "optimizer"
  // only where they fit between those.
  std::vector<double> drawn;
  auto fits = [&](double x) {
    for (double d : drawn)
      if (std::abs(x - d) < 13) return false;
    return true;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (const PhaseMark& m : t.marks) {
      const bool layer = m.label.size() > 1 && m.label[0] == 'L' && std::isdigit(static_cast<unsigned char>(m.label[1]));
      if (layer != (pass == 0)) continue;
      const double x = X(m.at);
      s += "<line x1=\"" + fmt(x, 2) + "\" x2=\"" + fmt(x, 2) + "\" y1=\"" + fmt(top + ph) + "\" y2=\"" +
           fmt(top + ph + 6) + "\" stroke=\"#333\"/>\n";
      if (!fits(x)) continue;
      s += "<text class=\"mark\" transform=\"translate(" + fmt(x + 3, 2) + "," + fmt(top + ph + 10) +
           ") rotate(60)\" font-size=\"10\">" + escapeXml(m.label) + "</text>\n";
      drawn.push_back(x);
    }
  s += "<text x=\"" + fmt(left + pw / 2) + "\" y=\"" + fmt(H - 8) +
       "\" text-anchor=\"middle\">launches in schedule order; marks: where each layer's forward (L3) or backward (L3 bwd) begins</text>\n";

  // Legend.
  double ly = top + 10;
  const double lx = left + pw + 20;
  for (MemoryKind k : {MemoryKind::Saved, MemoryKind::Temporary, MemoryKind::Gradient, MemoryKind::Optimizer}) {
    s += "<rect x=\"" + fmt(lx) + "\" y=\"" + fmt(ly) + "\" width=\"14\" height=\"14\" fill=\"" + kindColour(k) +
         "\"/><text x=\"" + fmt(lx + 20) + "\" y=\"" + fmt(ly + 11) + "\">" + memoryKindName(k) + "</text>\n";
    ly += 22;
  }
  for (size_t i = 0; i < t.resident.size(); ++i) {
    s += "<rect x=\"" + fmt(lx) + "\" y=\"" + fmt(ly) + "\" width=\"14\" height=\"14\" fill=\"" + bandColour(i) +
         "\" fill-opacity=\"0.35\"/><text x=\"" + fmt(lx + 20) + "\" y=\"" + fmt(ly + 11) + "\">" +
         escapeXml(t.resident[i].label) + "</text>\n";
    ly += 22;
  }
  // The largest values, where a reader looks first; alike ones (the same size, kind and kernel
  // across layers) as one line with their count.
  ly += 14;
  s += "<text x=\"" + fmt(lx) + "\" y=\"" + fmt(ly) + "\" font-weight=\"bold\">largest values</text>\n";
  std::vector<std::pair<std::string, int>> alike;  // "size kind|producer group", count; largest first
  for (const MemoryBox* b : largest(t, t.boxes.size())) {
    const std::string key = humanBytes(b->bytes) + " " + memoryKindName(b->kind) + "|" + bench::kernelGroupName(b->producer);
    auto it = std::find_if(alike.begin(), alike.end(), [&](const auto& a) { return a.first == key; });
    if (it != alike.end()) ++it->second;  // counted wherever its members fall among equal sizes
    else if (alike.size() < 8) alike.push_back({key, 1});
  }
  for (const auto& [key, count] : alike) {
    ly += 30;
    const size_t bar = key.find('|');
    s += "<text x=\"" + fmt(lx) + "\" y=\"" + fmt(ly - 12) + "\" font-size=\"10\">" + escapeXml(key.substr(0, bar)) +
         (count > 1 ? " x " + std::to_string(count) : "") + "</text><text x=\"" + fmt(lx) + "\" y=\"" + fmt(ly) +
         "\" font-size=\"10\" fill=\"#555\">" + escapeXml(key.substr(bar + 1)) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

std::string memoryTimelineJson(const MemoryTimeline& t, const std::string& title) {
  nlohmann::ordered_json j;
  j["title"] = title;
  j["positions"] = t.positions;
  j["arena_bytes"] = t.arenaBytes;
  j["resident_bytes"] = t.residentBytes;
  j["peak"] = {{"at", t.peakAt}, {"live_bytes", t.peakLiveBytes}};
  j["resident"] = nlohmann::ordered_json::array();
  for (const ResidentBand& b : t.resident) j["resident"].push_back({{"label", b.label}, {"bytes", b.bytes}});
  j["marks"] = nlohmann::ordered_json::array();
  for (const PhaseMark& m : t.marks) j["marks"].push_back({{"at", m.at}, {"label", m.label}});
  j["largest"] = nlohmann::ordered_json::array();
  for (const MemoryBox* b : largest(t, 10))
    j["largest"].push_back({{"name", b->name}, {"bytes", b->bytes}, {"kind", memoryKindName(b->kind)}, {"producer", b->producer}});
  j["values"] = nlohmann::ordered_json::array();
  for (const MemoryBox& b : t.boxes)
    j["values"].push_back({{"name", b.name},
                           {"kind", memoryKindName(b.kind)},
                           {"producer", b.producer},
                           {"offset", b.offset},
                           {"bytes", b.bytes},
                           {"def", b.def},
                           {"last_use", b.lastUse}});
  return j.dump(1) + "\n";
}

void writeMemoryTimeline(const std::string& path, const MemoryTimeline& t, const std::string& title) {
  auto endsWith = [&](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (endsWith(".svg")) writeFileAtomically(path, memoryTimelineSvg(t, title));
  else if (endsWith(".json")) writeFileAtomically(path, memoryTimelineJson(t, title));
  else throw Error("--memory-timeline " + path + ": name a .svg (the picture) or a .json (its data) file");
}

}  // namespace fusec::cli
