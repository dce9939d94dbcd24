// Fixed-size blocks for the IR's Op and Value objects, carved from large slabs. A training
// step's graph is millions of these; from malloc they scattered across a heap of several
// hundred MB, so every walk of the graph missed the caches more the larger the graph (dce's
// pure walk cost about twice as much per op at 1,000 layers as at 250). Slabs keep them
// dense, a freed block is reused for the next object of its size, and every slab goes back
// to the system when the last block is freed (a process that compiles and then trains, or a
// PyTorch process between compiles, keeps none). One lock: the C interface may compile on
// several threads. Under AddressSanitizer the pool is bypassed, so a use after free of an op
// or a value is still reported.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define FUSEC_SLAB_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUSEC_SLAB_POOL_BYPASS 1
#endif
#endif

namespace fusec {

template <size_t Size>
class SlabPool {
  static_assert(Size >= sizeof(void*));

 public:
  static constexpr size_t kBlock =
      (Size + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
  static constexpr size_t kSlabBytes = size_t(1) << 20;

  static void* allocate() {
    SlabPool& p = instance();
    std::lock_guard<std::mutex> lock(p.mutex_);
    ++p.live_;
    if (p.free_ && p.fresh_ == 0) {
      void* b = p.free_;
      p.free_ = *static_cast<void**>(b);
      return b;
    }
    if (p.next_ == p.end_) p.grow();
    void* b = p.next_;
    p.next_ += kBlock;
    return b;
  }

  static void release(void* b) noexcept {
    if (!b) return;
    SlabPool& p = instance();
    std::lock_guard<std::mutex> lock(p.mutex_);
    *static_cast<void**>(b) = p.free_;
    p.free_ = b;
    if (--p.live_ == 0) p.reset();
  }

  // While one of these lives, blocks come from the end of the slabs, never from the free list:
  // objects made one after another then lie one after another (passes/compact.cpp).
  class FreshBlocks {
   public:
    FreshBlocks() { adjust(1); }
    ~FreshBlocks() { adjust(-1); }
    FreshBlocks(const FreshBlocks&) = delete;
    FreshBlocks& operator=(const FreshBlocks&) = delete;

   private:
    static void adjust(int by) {
      SlabPool& p = instance();
      std::lock_guard<std::mutex> lock(p.mutex_);
      p.fresh_ += by;
    }
  };

  // Blocks handed out and not yet released; slabs held (both for tests).
  static size_t live() {
    SlabPool& p = instance();
    std::lock_guard<std::mutex> lock(p.mutex_);
    return p.live_;
  }
  static size_t slabs() {
    SlabPool& p = instance();
    std::lock_guard<std::mutex> lock(p.mutex_);
    return p.slabs_.size();
  }

 private:
  static SlabPool& instance() {
    static SlabPool* p = new SlabPool;  // never destroyed: a static graph may outlive it
    return *p;
  }

  void grow() {
    char* s = static_cast<char*>(std::malloc(kSlabBytes));
    if (!s) {
      --live_;
      throw std::bad_alloc();
    }
    slabs_.push_back(s);
    next_ = s;
    end_ = s + kSlabBytes / kBlock * kBlock;
  }

  void reset() noexcept {
    for (char* s : slabs_) std::free(s);
    slabs_.clear();
    free_ = nullptr;
    next_ = end_ = nullptr;
  }

  std::mutex mutex_;
  std::vector<char*> slabs_;
  void* free_ = nullptr;
  char* next_ = nullptr;
  char* end_ = nullptr;
  size_t live_ = 0;
  int fresh_ = 0;  // FreshBlocks alive
};

// Derive from this (T the deriving class) to take T's objects from a SlabPool; a class
// derived further (another size) falls back to the global operator new.
template <class T>
struct SlabAllocated {
  static void* operator new(size_t n) {
#ifndef FUSEC_SLAB_POOL_BYPASS
    if (n == sizeof(T)) return SlabPool<sizeof(T)>::allocate();
#endif
    return ::operator new(n);
  }
  static void operator delete(void* p, size_t n) noexcept {
#ifndef FUSEC_SLAB_POOL_BYPASS
    if (n == sizeof(T)) return SlabPool<sizeof(T)>::release(p);
#endif
    ::operator delete(p);
  }
};

}  // namespace fusec
