#include "bench/attention_bench.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

namespace fusec::bench {

std::vector<AttentionRow> runAttentionSweep(const AttentionSweep& s, const std::map<std::string, AttentionRunner>& runners,
                                            std::ostream* progress) {
  for (const auto& impl : s.impls)
    if (!runners.count(impl)) throw Error("internal: no attention runner '" + impl + "'");
  const size_t total = s.ds.size() * s.seqs.size() * s.impls.size();
  std::vector<AttentionRow> rows;
  for (int64_t d : s.ds)
    for (int64_t seq : s.seqs)
      for (const auto& impl : s.impls) {
        AttentionRow row;
        row.batch = s.batch, row.d = d, row.seq = seq, row.impl = impl;
        if (progress)
          *progress << "[" << rows.size() + 1 << "/" << total << "] attention batch=" << s.batch << " d=" << d
                    << " seq=" << seq << " " << impl << std::flush;
        try {
          AttentionRun r = runners.at(impl)(AttentionCase{s.batch, d, seq, s.warmup, s.iters});
          row.forwardMs = summarize(r.forwardMs);
          row.backwardMs = summarize(r.backwardMs);
          row.savedBytes = r.savedBytes, row.peakBytes = r.peakBytes;
        } catch (const std::exception& e) {
          row.status = statusFromError(e.what());
        }
        if (progress) *progress << ": " << row.status << "\n";
        rows.push_back(std::move(row));
      }
  return rows;
}

namespace {

using Json = nlohmann::ordered_json;

Json orNull(const std::optional<double>& x) { return x ? Json(*x) : Json(nullptr); }
Json orNull(const std::optional<int64_t>& x) { return x ? Json(*x) : Json(nullptr); }
std::optional<double> median(const std::optional<Stats>& s) { return s ? std::optional<double>(s->median) : std::nullopt; }

// The fixed key order of every format.
Json toJson(const AttentionRow& r) {
  return Json{{"batch", r.batch},
              {"d", r.d},
              {"seq", r.seq},
              {"impl", r.impl},
              {"status", r.status},
              {"forward_ms", orNull(median(r.forwardMs))},
              {"forward_std_ms", orNull(r.forwardMs ? std::optional<double>(r.forwardMs->std) : std::nullopt)},
              {"backward_ms", orNull(median(r.backwardMs))},
              {"backward_std_ms", orNull(r.backwardMs ? std::optional<double>(r.backwardMs->std) : std::nullopt)},
              {"saved_for_backward_bytes", orNull(r.savedBytes)},
              {"peak_bytes", orNull(r.peakBytes)}};
}

std::string cell(const Json& v, bool bytes) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  char buf[64];
  if (bytes) std::snprintf(buf, sizeof buf, "%.1f MiB", v.get<double>() / (1 << 20));
  else if (v.is_number_integer()) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v.get<int64_t>()));
  else std::snprintf(buf, sizeof buf, "%.3f", v.get<double>());
  return buf;
}

}  // namespace

std::string formatAttentionRows(const std::vector<AttentionRow>& rows, Format format) {
  std::string s;
  if (format == Format::Json) {
    for (const auto& r : rows) s += toJson(r).dump() + "\n";
    return s;
  }
  const Json keys = toJson(AttentionRow{});
  if (format == Format::Csv) {
    std::string head;
    for (auto it = keys.begin(); it != keys.end(); ++it) head += (head.empty() ? "" : ",") + it.key();
    s = head + "\n";
    for (const auto& r : rows) {
      std::string line;
      const Json j = toJson(r);  // items() refers into it
      for (const auto& [k, v] : j.items())
        line += (line.empty() ? "" : ",") + (v.is_null() ? std::string() : v.is_string() ? v.get<std::string>() : v.dump());
      s += line + "\n";
    }
    return s;
  }
  const std::vector<std::string> head = {"batch", "d", "seq", "impl", "status", "fwd ms", "bwd ms (1)", "saved for bwd (2)",
                                         "peak mem"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    const Json j = toJson(r);
    cells.push_back({cell(j["batch"], false), cell(j["d"], false), cell(j["seq"], false), r.impl, r.status,
                     cell(j["forward_ms"], false), cell(j["backward_ms"], false), cell(j["saved_for_backward_bytes"], true),
                     cell(j["peak_bytes"], true)});
  }
  std::vector<size_t> w(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    w[c] = head[c].size();
    for (const auto& r : cells) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cs) {
    std::string l = "|";
    for (size_t c = 0; c < cs.size(); ++c) l += " " + cs[c] + std::string(w[c] - cs[c].size(), ' ') + " |";
    return l + "\n";
  };
  s = line(head);
  std::vector<std::string> rule;
  for (size_t x : w) rule.push_back(std::string(x, '-'));
  s += line(rule);
  for (const auto& r : cells) s += line(r);
  s += "\n(1) Medians. Eager: autograd's backward of a fresh forward. Compiled: the @attention_backward program, which "
       "recomputes S and P from q and k instead of reading a saved P.\n"
       "(2) Eager: the P matrix [B, N, N] f32 autograd keeps; compiled: the forward program's arena (nothing is kept for "
       "its backward).\n";
  return s;
}

}  // namespace fusec::bench
