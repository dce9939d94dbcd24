// Progress of long work (a benchmark sweep's rows, a cold NVRTC compile of a large model's
// kernels): how many of how many, the time so far and an estimate of the time left.
//   Rows (a sweep): a line per finished row. On a terminal, the row being run is shown in
//     place first ("\r", cleared) and its finished line replaces it.
//   Counts (kernels): on a terminal one line rewritten in place as items finish, ended with
//     a newline at the last; elsewhere a plain line at every further tenth of the work.
//   Off a terminal (a log, a pipe, CI): plain lines, never control characters.
// Thread-safe: compile workers report from their threads.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace fusec {

// "12 s", "3:05", "1:02:09": a duration as people read it.
std::string formatDuration(double seconds);
// "[3/12] WHAT: DETAIL (0:41, ETA 2:03)"; no ETA before the first item is done, none after the
// last. Pure: the line Progress prints.
std::string progressLine(const std::string& what, int64_t done, int64_t total, const std::string& detail,
                         double elapsedSeconds);
// Whether `os` is std::cout or std::cerr on a terminal.
bool isTerminal(const std::ostream& os);

class Progress {
 public:
  enum class Style { Rows, Counts };
  Progress(std::ostream& out, std::string what, int64_t total, Style style);
  Progress(std::ostream& out, std::string what, int64_t total, Style style, bool terminal);  // tests choose
  ~Progress();  // ends an in-place line with its newline
  // The next item starts (Rows, on a terminal: shown in place until it is done).
  void begin(const std::string& detail);
  // One more item done; `detail` says which and how it went.
  void step(const std::string& detail = "");
  int64_t done() const { return done_; }
  // Says nothing until the work has taken `seconds` (a warm compile that takes milliseconds
  // prints no progress at all).
  void quietFor(double seconds) { quiet_ = seconds; }

 private:
  double elapsed() const;
  std::ostream& out_;
  std::string what_;
  int64_t total_, done_ = 0;
  Style style_;
  bool terminal_, open_ = false;
  int64_t printedTenth_ = 0;  // Counts off a terminal: the last tenth printed
  double quiet_ = 0;
  bool spoke_ = false;        // printed anything
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
};

}  // namespace fusec
