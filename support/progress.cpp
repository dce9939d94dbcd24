#include "support/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace fusec {

std::string formatDuration(double seconds) {
  const int64_t s = int64_t(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

std::string progressLine(const std::string& what, int64_t done, int64_t total, const std::string& detail,
                         double elapsedSeconds) {
  std::string s = "[" + std::to_string(done) + "/" + std::to_string(total) + "] " + what;
  if (!detail.empty()) s += ": " + detail;
  s += " (" + formatDuration(elapsedSeconds);
  // The rate so far, carried over what is left: rows and kernels of one sweep or model cost
  // about the same, and a later estimate corrects an early one.
  if (done > 0 && done < total) s += ", ETA " + formatDuration(elapsedSeconds / double(done) * double(total - done));
  return s + ")";
}

bool isTerminal(const std::ostream& os) {
  if (&os == &std::cout) return ::isatty(1) == 1;
  if (&os == &std::cerr || &os == &std::clog) return ::isatty(2) == 1;
  return false;
}

Progress::Progress(std::ostream& out, std::string what, int64_t total, Style style)
    : Progress(out, std::move(what), total, style, isTerminal(out)) {}

Progress::Progress(std::ostream& out, std::string what, int64_t total, Style style, bool terminal)
    : out_(out),
      what_(std::move(what)),
      total_(total),
      style_(style),
      terminal_(terminal),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (open_) out_ << "\n" << std::flush;
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::begin(const std::string& detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!terminal_ || style_ != Style::Rows || (!spoke_ && elapsed() < quiet_)) return;
  spoke_ = true;
  std::string line = "[" + std::to_string(done_ + 1) + "/" + std::to_string(total_) + "] " + what_ + ": " + detail + " ...";
  if (done_ > 0) line += " (ETA " + formatDuration(elapsed() / double(done_) * double(total_ - done_)) + ")";
  out_ << "\r\033[K" << line << std::flush;
  open_ = true;
}

void Progress::step(const std::string& detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++done_;
  const double seconds = elapsed();
  if (!spoke_ && seconds < quiet_) return;
  spoke_ = true;
  const std::string line = progressLine(what_, done_, total_, detail, seconds);
  if (terminal_) {
    out_ << "\r\033[K" << line;  // replaces the line in place
    open_ = style_ == Style::Counts && done_ < total_;
    if (!open_) out_ << "\n";
  } else if (style_ == Style::Rows) {
    out_ << line << "\n";
  } else {
    const int64_t tenth = total_ > 0 ? done_ * 10 / total_ : 10;
    if (tenth == printedTenth_) return;
    printedTenth_ = tenth;
    out_ << line << "\n";
  }
  out_ << std::flush;
}

}  // namespace fusec
