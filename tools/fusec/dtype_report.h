// `fusec compile --print-dtypes`: the dtype of every named value of the traced model after
// the program passes, so a reader can check the autocast policy against PyTorch's at a glance:
//   params f32          (one line when all traced params agree, else one per param)
//   <value> <dtype>     every named value the trace produced, in trace order
//   gradients f32       (over the "<param>.grad" values; one per gradient when they differ)
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fusec::cli {

// What the trace named, recorded before any pass runs.
struct TracedNames {
  std::vector<std::string> params;  // param names
  std::vector<std::string> values;  // named non-source values, in op order
};
TracedNames recordTracedNames(const Graph& g);

// Throws Error when a traced value no longer exists (a pass dropped its name).
void printDTypes(const Graph& g, const TracedNames& traced, std::ostream& out);

}  // namespace fusec::cli
