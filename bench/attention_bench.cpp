#include "bench/attention_bench.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "bench/markdown.h"
#include "support/progress.h"

namespace fusec::bench {

std::vector<AttentionRow> runAttentionSweep(const AttentionSweep& s, const std::map<std::string, AttentionRunner>& runners,
                                            std::ostream* progress) {
  for (const auto& impl : s.impls)
    if (!runners.count(impl)) throw Error("internal: no attention runner '" + impl + "'");
  const size_t total = s.dtypes.size() * s.ds.size() * s.seqs.size() * s.impls.size();
  std::vector<AttentionRow> rows;
  std::optional<Progress> bar;
  if (progress) bar.emplace(*progress, "attention", int64_t(total), Progress::Style::Rows);
  for (const auto& dtype : s.dtypes)
  for (int64_t d : s.ds)
    for (int64_t seq : s.seqs)
      for (const auto& impl : s.impls) {
        AttentionRow row;
        row.batch = s.batch, row.d = d, row.seq = seq, row.impl = impl, row.dtype = dtype;
        const std::string what = "batch=" + std::to_string(s.batch) + " d=" + std::to_string(d) + " seq=" +
                                 std::to_string(seq) + " " + dtype + " " + impl;
        if (bar) bar->begin(what);
        try {
          AttentionRun r = runners.at(impl)(AttentionCase{s.batch, d, seq, s.warmup, s.iters, dtype});
          row.forwardMs = summarize(r.forwardMs);
          row.backwardMs = summarize(r.backwardMs);
          row.savedBytes = r.savedBytes, row.peakBytes = r.peakBytes;
        } catch (const std::exception& e) {
          row.status = statusFromError(e.what());
        }
        if (bar) bar->step(what + ": " + row.status);
        rows.push_back(std::move(row));
      }
  return rows;
}

double causalForwardFlops(int64_t batch, int64_t seq, int64_t d) {
  return 4.0 * double(batch) * double(seq) * double(seq) * double(d) / 2;
}

namespace {

using Json = nlohmann::ordered_json;

Json orNull(const std::optional<double>& x) { return x ? Json(*x) : Json(nullptr); }
Json orNull(const std::optional<int64_t>& x) { return x ? Json(*x) : Json(nullptr); }
std::optional<double> median(const std::optional<Stats>& s) { return s ? std::optional<double>(s->median) : std::nullopt; }

// The fixed key order of every format.
// fwd+bwd: a compiled backward program runs its own forward (o and lse, or S and P), so its
// time is the whole; eager's and SDPA's backward is autograd's alone, so theirs is the sum.
std::optional<double> fwdBwdMs(const AttentionRow& r) {
  if (!r.forwardMs || !r.backwardMs) return std::nullopt;
  const bool ownForward = r.impl == "compiled" || r.impl == "fused";
  return ownForward ? r.backwardMs->median : r.forwardMs->median + r.backwardMs->median;
}

std::optional<double> tflops(double flops, const std::optional<double>& ms) {
  if (!ms || !(*ms > 0)) return std::nullopt;
  return flops / (*ms * 1e-3) / 1e12;
}

Json toJson(const AttentionRow& r) {
  const double fwd = causalForwardFlops(r.batch, r.seq, r.d);
  return Json{{"batch", r.batch},
              {"d", r.d},
              {"seq", r.seq},
              {"dtype", r.dtype},
              {"impl", r.impl},
              {"status", r.status},
              {"forward_ms", orNull(median(r.forwardMs))},
              {"forward_std_ms", orNull(r.forwardMs ? std::optional<double>(r.forwardMs->std) : std::nullopt)},
              {"backward_ms", orNull(median(r.backwardMs))},
              {"backward_std_ms", orNull(r.backwardMs ? std::optional<double>(r.backwardMs->std) : std::nullopt)},
              {"fwd_bwd_ms", orNull(fwdBwdMs(r))},
              {"forward_tflops", orNull(tflops(fwd, median(r.forwardMs)))},
              {"fwd_bwd_tflops", orNull(tflops(3.5 * fwd, fwdBwdMs(r)))},
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
  const std::vector<std::string> head = {"batch", "d", "seq", "dtype", "impl", "status", "fwd ms", "bwd ms (1)",
                                         "fwd+bwd ms (1)", "fwd TFLOP/s (3)", "fwd+bwd TFLOP/s (3)", "saved for bwd (2)",
                                         "peak mem"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    const Json j = toJson(r);
    cells.push_back({cell(j["batch"], false), cell(j["d"], false), cell(j["seq"], false), r.dtype, r.impl, r.status,
                     cell(j["forward_ms"], false), cell(j["backward_ms"], false), cell(j["fwd_bwd_ms"], false),
                     cell(j["forward_tflops"], false), cell(j["fwd_bwd_tflops"], false),
                     cell(j["saved_for_backward_bytes"], true), cell(j["peak_bytes"], true)});
  }
  s = markdownTable(head, cells);
  s += "\n(1) Medians. Eager and sdpa-* (PyTorch's scaled_dot_product_attention per backend, --vs-torch): autograd's "
       "backward of a fresh forward; fwd+bwd is their sum. Compiled (naive) and fused: "
       "the @attention_backward program, which runs its own forward (naive: S and P from q and k; fused: o and the lse) "
       "and then the backward, so its time is the fwd+bwd time too.\n"
       "(2) Eager: the P matrix [B, N, N] autograd keeps; sdpa-*: what a forward with grad keeps (o and the lse); "
       "compiled and fused: the forward program's arena (fused: o and the lse, O(N)).\n"
       "(3) FlashAttention's count: causal forward 4 B N^2 d / 2 FLOPs, fwd+bwd 3.5 times that.\n";
  return s;
}

AttentionRow parseAttentionJsonRow(const std::string& line) {
  Json j;
  try {
    j = Json::parse(line);
  } catch (const std::exception& e) {
    throw Error("attention row is not JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) throw Error("attention row is not a JSON object");
  const Json keys = toJson(AttentionRow{});
  for (auto it = keys.begin(); it != keys.end(); ++it)
    if (!j.contains(it.key())) throw Error("attention row lacks \"" + it.key() + "\"");
  auto get = [&](const char* key, auto def) {
    const Json& v = j.at(key);
    try {
      return v.is_null() ? def : v.get<decltype(def)>();
    } catch (const std::exception&) {
      throw Error(std::string("attention row: \"") + key + "\" is " + v.dump());
    }
  };
  auto time = [&](const char* median, const char* std) -> std::optional<Stats> {
    if (j.at(median).is_null()) return std::nullopt;
    Stats s;
    s.median = s.mean = s.min = s.max = get(median, 0.0);
    s.std = get(std, 0.0);
    if (!(s.median >= 0)) throw Error(std::string("attention row: \"") + median + "\" is negative");
    return s;
  };
  AttentionRow r;
  r.batch = get("batch", int64_t(0)), r.d = get("d", int64_t(0)), r.seq = get("seq", int64_t(0));
  r.dtype = get("dtype", std::string()), r.impl = get("impl", std::string()), r.status = get("status", std::string());
  if (r.impl.empty()) throw Error("attention row: empty \"impl\"");
  r.forwardMs = time("forward_ms", "forward_std_ms");
  r.backwardMs = time("backward_ms", "backward_std_ms");
  if (!j.at("saved_for_backward_bytes").is_null()) r.savedBytes = get("saved_for_backward_bytes", int64_t(0));
  if (!j.at("peak_bytes").is_null()) r.peakBytes = get("peak_bytes", int64_t(0));
  return r;
}

void mergeAttentionRows(std::vector<AttentionRow>& rows, const std::vector<AttentionRow>& extra) {
  for (const auto& x : extra) {
    size_t at = rows.size();
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].dtype == x.dtype && rows[i].d == x.d && rows[i].seq == x.seq) at = i + 1;
    rows.insert(rows.begin() + std::ptrdiff_t(at), x);
  }
}

}  // namespace fusec::bench
