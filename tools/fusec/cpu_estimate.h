// What a `fusec run` on the CPU interpreter will take, said before it starts: a step's peak
// memory and time from the program alone (ir/interpreter.h interpreterCost), and a refusal,
// in one line, of a run whose peak this machine cannot hold (it would be killed hours in, or
// swap until nothing else runs).
#pragma once
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace fusec::cli {

struct CpuEstimate {
  double peakGB = 0;   // the values held at once, with the program's state the runner keeps
  double stepSeconds = 0;
  double availableGB = 0;  // MemAvailable of /proc/meminfo (0: unknown)
};

// `threads`: the cores the interpreter uses; `blas`: whether its GEMMs go to a BLAS.
CpuEstimate estimateCpuStep(const Graph& g, unsigned threads, bool blas);

// "run: CPU interpreter: about 95 s and 6.9 GB a step (2 cores, OpenBLAS)" for steps long
// enough to be worth saying (two seconds or more); "" otherwise. Throws Error (one line) when the
// peak exceeds the memory available.
std::string describeCpuStep(const Graph& g);

}  // namespace fusec::cli
