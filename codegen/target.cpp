#include "codegen/target.h"

#include <cstdlib>

namespace fusec::codegen {

bool wgmmaAllowedByEnv() {
  const char* v = std::getenv("FUSEC_WGMMA");
  return !(v && std::string(v) == "0");
}

Target offlineTarget() {
  Target t;
  t.wgmma = wgmmaAllowedByEnv();
  return t;
}

}  // namespace fusec::codegen
