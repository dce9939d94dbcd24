// A tensor shape: its dimensions, up to six of them inside the Type that holds it.
//
// Every Value carries a Type, and Types are copied everywhere: the verifier infers each op's
// result types from copies of its operands' after every pass, builders and rewrites copy the
// types they derive from. With std::vector<int64_t> each copy was a heap allocation, a third
// of all the allocations of a compile, and a Value's dimensions lived in a second block away
// from the Value itself (issue 39). Transformer shapes have rank 6 at most; a longer one (the
// IR allows any rank) moves to the heap, with the same behaviour. A Shape converts to and from
// std::vector<int64_t> (attributes such as `shape` and `perm` are vectors).
#pragma once
#include <cstdint>

#include "support/inline_vector.h"

namespace fusec {

using Shape = InlineVector<int64_t, 6>;

}  // namespace fusec
