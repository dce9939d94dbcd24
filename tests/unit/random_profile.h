// A profile of a planned tiny program with random non-zero launch times (never zeros: a
// dropped launch or a misaligned time shows), for the report and trace tests on the CPU.
#pragma once
#include <random>
#include <vector>

#include "bench/profile.h"
#include "bench/program.h"
#include "frontend/models/zoo_model.h"

namespace fusec::test {

// `program` names it; `pass` picks forward or step. With the passes' wall times as its host
// phases (the trace's CPU track).
inline bench::ProgramProfile randomProfile(const char* program, bench::BenchPass pass, std::mt19937& rng,
                                           DType dtype = DType::f32,
                                           AttentionLowering attention = AttentionLowering::Default) {
  Module m;
  std::vector<PassTiming> passes;
  Graph& g = bench::buildProgram(m, *models::transformerModel(models::namedConfig("tiny")), pass, dtype, 2, 16,
                                 models::AdamWConfig{}, attention, &passes);
  bench::ProgramProfile p;
  p.program = program;
  p.launches = bench::classifyLaunches(g);
  std::uniform_real_distribution<double> ms(0.005, 0.5);
  for (size_t i = 0; i < p.launches.size(); ++i) p.ms.push_back(ms(rng));
  p.graphMs = 0.8 * p.totalMs();
  for (const PassTiming& t : passes) p.host.push_back({"pass " + t.name, t.ms});
  return p;
}

}  // namespace fusec::test
