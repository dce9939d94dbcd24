#include "bench/report.h"

#include <algorithm>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <tuple>

#include "ir/graph.h"

namespace fusec::bench {

using Json = nlohmann::ordered_json;

std::optional<double> BenchRow::tokensPerSecond() const {
  if (!ok() || ms->median <= 0) return std::nullopt;
  return double(batch * ctx * gpus) / (ms->median / 1e3);
}

std::optional<double> BenchRow::mfu() const {
  auto tps = tokensPerSecond();
  if (!tps || peakTflops <= 0 || modelFlopsPerToken <= 0) return std::nullopt;
  return *tps / gpus * modelFlopsPerToken / (peakTflops * 1e12);
}

std::optional<int64_t> BenchRow::peakBytes() const {
  if (allocatedBytes) return allocatedBytes;
  if (arenaBytes && residentBytes) return *arenaBytes + *residentBytes;
  return std::nullopt;
}

std::string statusFromError(const std::string& message) {
  if (message.find("out of memory") != std::string::npos || message.find("out of GPU memory") != std::string::npos)
    return "OOM";
  return message.empty() ? std::string("error") : message;
}

void fillSpeedups(std::vector<BenchRow>& rows) {
  using Key = std::tuple<std::string, int64_t, int64_t, std::string, std::string, int>;
  auto key = [](const BenchRow& r) { return Key{r.model, r.ctx, r.batch, r.dtype, r.pass, r.warmup}; };
  std::map<Key, double> eager;
  for (const auto& r : rows)
    if (r.impl == "eager" && r.ok()) eager[key(r)] = r.ms->median;
  for (auto& r : rows) {
    auto it = eager.find(key(r));
    r.speedup = r.ok() && it != eager.end() && r.ms->median > 0 ? std::optional(it->second / r.ms->median) : std::nullopt;
  }
}

void fillScalingEfficiency(std::vector<BenchRow>& rows) {
  using Key = std::tuple<std::string, int64_t, int64_t, std::string, std::string, std::string>;
  auto key = [](const BenchRow& r) { return Key{r.model, r.ctx, r.batch, r.dtype, r.pass, r.impl}; };
  std::map<Key, double> one;
  for (const auto& r : rows)
    if (r.gpus == 1 && r.ok()) one[key(r)] = r.ms->median;
  for (auto& r : rows) {
    if (r.gpus == 1 || r.scalingEfficiency || !r.ok() || r.ms->median <= 0) continue;
    if (auto it = one.find(key(r)); it != one.end()) r.scalingEfficiency = it->second / r.ms->median;
  }
}

Format parseFormat(const std::string& name) {
  if (name == "table") return Format::Table;
  if (name == "json") return Format::Json;
  if (name == "csv") return Format::Csv;
  throw Error("unknown format '" + name + "' (known: table, json, csv)");
}

namespace {

template <class T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json stat(const BenchRow& r, double Stats::*field) { return r.ok() ? Json((*r.ms).*field) : Json(nullptr); }

// One column: its JSON/CSV key, how the table shows it (header, scale, decimals), its value.
struct Column {
  const char* key;
  const char* header;  // nullptr: not in the table
  double scale;
  int decimals;
  std::function<Json(const BenchRow&)> get;
  // A data-parallel column: in the table only when a row has several GPUs, and optional in
  // a parsed JSON row (the single-GPU scripts do not write it).
  bool dataParallel = false;
};

const std::vector<Column>& columns() {
  static const std::vector<Column> cols = {
      {"model", "model", 1, 0, [](const BenchRow& r) { return Json(r.model); }},
      {"ctx", "ctx", 1, 0, [](const BenchRow& r) { return Json(r.ctx); }},
      {"batch", "batch", 1, 0, [](const BenchRow& r) { return Json(r.batch); }},
      {"dtype", "dtype", 1, 0, [](const BenchRow& r) { return Json(r.dtype); }},
      {"pass", "pass", 1, 0, [](const BenchRow& r) { return Json(r.pass); }},
      {"impl", "impl", 1, 0, [](const BenchRow& r) { return Json(r.impl); }},
      {"warmup", "warmup", 1, 0, [](const BenchRow& r) { return Json(r.warmup); }},
      {"iters", "iters", 1, 0, [](const BenchRow& r) { return Json(r.iters); }},
      {"status", "status", 1, 0, [](const BenchRow& r) { return Json(r.status); }},
      {"mean_ms", "mean ms", 1, 3, [](const BenchRow& r) { return stat(r, &Stats::mean); }},
      {"std_ms", "std ms", 1, 3, [](const BenchRow& r) { return stat(r, &Stats::std); }},
      {"min_ms", "min ms", 1, 3, [](const BenchRow& r) { return stat(r, &Stats::min); }},
      {"max_ms", "max ms", 1, 3, [](const BenchRow& r) { return stat(r, &Stats::max); }},
      {"median_ms", "median ms", 1, 3, [](const BenchRow& r) { return stat(r, &Stats::median); }},
      {"cv", "CV %", 100, 2, [](const BenchRow& r) { return stat(r, &Stats::cv); }},
      {"tokens_per_s", "tokens/s", 1, 0, [](const BenchRow& r) { return opt(r.tokensPerSecond()); }},
      {"peak_bytes", "peak MiB", 1.0 / (1 << 20), 1, [](const BenchRow& r) { return opt(r.peakBytes()); }},
      {"allocated_bytes", nullptr, 1, 0, [](const BenchRow& r) { return opt(r.allocatedBytes); }},
      {"reserved_bytes", "reserved MiB", 1.0 / (1 << 20), 1, [](const BenchRow& r) { return opt(r.reservedBytes); }},
      {"arena_bytes", nullptr, 1, 0, [](const BenchRow& r) { return opt(r.arenaBytes); }},
      {"resident_bytes", nullptr, 1, 0, [](const BenchRow& r) { return opt(r.residentBytes); }},
      {"speedup", "speedup", 1, 2, [](const BenchRow& r) { return opt(r.speedup); }},
      {"model_flops_per_token", nullptr, 1, 0, [](const BenchRow& r) { return Json(r.modelFlopsPerToken); }},
      {"peak_tflops", nullptr, 1, 0, [](const BenchRow& r) { return Json(r.peakTflops); }},
      {"mfu", "MFU %", 100, 1, [](const BenchRow& r) { return opt(r.mfu()); }},
      {"gpus", "GPUs", 1, 0, [](const BenchRow& r) { return Json(r.gpus); }, true},
      {"scaling_efficiency", "scaling %", 100, 1, [](const BenchRow& r) { return opt(r.scalingEfficiency); }, true},
      {"exposed_comm_ms", "exposed comm ms", 1, 3, [](const BenchRow& r) { return opt(r.exposedCommMs); }, true},
  };
  return cols;
}

std::string fixed(double x, int decimals) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(decimals);
  os << x;
  return os.str();
}

std::string tableCell(const Column& c, const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() && c.scale == 1) return std::to_string(v.get<int64_t>());
  return fixed(v.get<double>() * c.scale, c.decimals);
}

std::string csvCell(const Json& v) {
  if (v.is_null()) return "";
  if (!v.is_string()) return v.dump();
  std::string s = v.get<std::string>();
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string table(const std::vector<BenchRow>& rows) {
  const bool several = std::any_of(rows.begin(), rows.end(), [](const BenchRow& r) { return r.gpus > 1; });
  std::vector<const Column*> cols;
  for (const auto& c : columns())
    if (c.header && (several || !c.dataParallel)) cols.push_back(&c);
  std::vector<std::vector<std::string>> cells(rows.size() + 1);
  for (const Column* c : cols) cells[0].push_back(c->header);
  for (size_t i = 0; i < rows.size(); ++i)
    for (const Column* c : cols) {
      std::string cell = tableCell(*c, c->get(rows[i]));
      // An error's full text is in the JSON and CSV rows and on stderr; the table keeps its start.
      constexpr size_t kStatusWidth = 48;
      if (std::string_view(c->key) == "status" && cell.size() > kStatusWidth) cell = cell.substr(0, kStatusWidth - 3) + "...";
      cells[i + 1].push_back(std::move(cell));
    }
  std::vector<size_t> width(cols.size(), 0);
  for (const auto& line : cells)
    for (size_t k = 0; k < line.size(); ++k) width[k] = std::max(width[k], line[k].size());
  // Text left-aligned, numbers right-aligned (the status column holds error text: keep it
  // last among the texts so long messages do not push the numbers around more than needed).
  std::string out;
  for (const auto& line : cells) {
    std::string row;
    for (size_t k = 0; k < line.size(); ++k) {
      const bool text = k <= 8;  // model .. status
      std::string pad(width[k] - line[k].size(), ' ');
      row += (k ? "  " : "") + (text ? line[k] + pad : pad + line[k]);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

}  // namespace

std::string formatRows(const std::vector<BenchRow>& rows, Format format) {
  std::string out;
  switch (format) {
    case Format::Table: return table(rows);
    case Format::Json:
      for (const auto& r : rows) {
        Json j = Json::object();
        for (const auto& c : columns()) j[c.key] = c.get(r);
        out += j.dump() + "\n";
      }
      return out;
    case Format::Csv:
      for (size_t k = 0; k < columns().size(); ++k) out += (k ? "," : "") + std::string(columns()[k].key);
      out += "\n";
      for (const auto& r : rows) {
        for (size_t k = 0; k < columns().size(); ++k) out += (k ? "," : "") + csvCell(columns()[k].get(r));
        out += "\n";
      }
      return out;
  }
  return out;
}

BenchRow parseJsonRow(const std::string& line) {
  Json j;
  try {
    j = Json::parse(line);
  } catch (const std::exception& e) {
    throw Error("bench row is not JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) throw Error("bench row is not a JSON object");
  for (const auto& c : columns())
    if (!c.dataParallel && !j.contains(c.key)) throw Error(std::string("bench row lacks \"") + c.key + "\"");
  auto get = [&](const char* key, auto def) {
    const Json& v = j.at(key);
    try {
      return v.is_null() ? def : v.get<decltype(def)>();
    } catch (const std::exception&) {
      throw Error(std::string("bench row: \"") + key + "\" is " + v.dump());
    }
  };
  auto optional = [&](const char* key, auto def) {
    return !j.contains(key) || j.at(key).is_null() ? std::optional<decltype(def)>() : std::optional(get(key, def));
  };
  BenchRow r;
  r.model = get("model", std::string());
  r.ctx = get("ctx", int64_t(0));
  r.batch = get("batch", int64_t(0));
  r.dtype = get("dtype", std::string());
  r.pass = get("pass", std::string());
  r.impl = get("impl", std::string());
  r.warmup = get("warmup", 0);
  r.iters = get("iters", 0);
  r.status = get("status", std::string());
  if (r.status == "OK") {
    Stats s;
    s.n = r.iters;
    s.mean = get("mean_ms", 0.0), s.std = get("std_ms", 0.0), s.min = get("min_ms", 0.0);
    s.max = get("max_ms", 0.0), s.median = get("median_ms", 0.0), s.cv = get("cv", 0.0);
    r.ms = s;
  }
  r.allocatedBytes = optional("allocated_bytes", int64_t(0));
  r.reservedBytes = optional("reserved_bytes", int64_t(0));
  r.arenaBytes = optional("arena_bytes", int64_t(0));
  r.residentBytes = optional("resident_bytes", int64_t(0));
  r.speedup = optional("speedup", 0.0);
  r.modelFlopsPerToken = get("model_flops_per_token", 0.0);
  r.peakTflops = get("peak_tflops", 0.0);
  if (j.contains("gpus")) r.gpus = get("gpus", 1);
  if (r.gpus < 1) throw Error("bench row: \"gpus\" is " + std::to_string(r.gpus));
  r.scalingEfficiency = optional("scaling_efficiency", 0.0);
  r.exposedCommMs = optional("exposed_comm_ms", 0.0);
  return r;
}

}  // namespace fusec::bench
