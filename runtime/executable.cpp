#include "runtime/executable.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

#include "codegen/generate.h"
#include "ir/collectives.h"
#include "ir/strided_view.h"
#include "ir/step_invariant.h"
#include "passes/output_placement.h"
#include "runtime/cublaslt_gemm.h"
#include "runtime/device.h"
#include "runtime/gemm_plan.h"
#include "runtime/host_storage.h"
#include "runtime/kernel_activity.h"
#include "runtime/kernel_module.h"
#include "runtime/kernel_spans.h"
#include "runtime/side_stream_waits.h"
#include "support/env.h"
#if FUSEC_HAVE_NCCL
#include "runtime/collectives.h"
#include "support/ptr_hash.h"
#endif

namespace fusec::rt {

namespace {

constexpr size_t kAllocAlign = 256;

size_t roundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool isSource(const Value* v) { return v->def && (v->def->kind == OpKind::Input || v->def->kind == OpKind::Param); }

// Switches in the environment (support/env.h), for A/B measurements.
bool autotuneAllowedByEnv() { return envSwitch("FUSEC_GEMM_AUTOTUNE", true); }
bool nodePriorityAllowedByEnv() { return envSwitch("FUSEC_GRAPH_NODE_PRIORITY", true); }
// Off unless FUSEC_SIDE_STREAM=1. Measured on an H100 (bench/RESULTS.md) it gains little
// where it should gain most: small b64's step -0.5%, medium b4's +2.4% (its 27 AdamW launches
// then contend for memory with the backward's GEMMs instead of following them); and its bits
// against one stream (ExecutableTest's fourth mode) have not yet run on a GPU.
bool sideStreamAllowedByEnv() { return envSwitch("FUSEC_SIDE_STREAM", false); }

}  // namespace

struct Executable::Impl {
  const Graph& g;
  ExecutableOptions opts;
  cudaStream_t stream = nullptr;
  std::unique_ptr<KernelModule> kernels;
  GemmTuningCache* gemmTuning = nullptr;  // the process's cache for this device and directory
  std::unique_ptr<CublasLtGemm> gemm;
  bool tuningPublished = false;
  // The arena is [0, topStart) and, from topStart on, `top`: the outputs' storage where
  // callerBuffers lets it wait until an output is not placed (splitTop); else topStart is
  // arenaBytes and `top` empty.
  DeviceBuffer resident, arena, top;
  size_t residentBytes = 0, arenaBytes = 0, topStart = 0;

  std::map<std::string, const Value*> sources;  // input/param values by name
  std::set<std::string> unbound;
  std::map<const Value*, const Value*> updates;  // in-place update output -> its param

  // One launch-list entry: every address fixed at construction.
  struct Entry {
    LaunchInfo info;
    const Op* op = nullptr;  // what it launches: its addresses are re-resolved from it (relink)
    const LoadedKernel* kernel = nullptr;
    std::vector<void*> pointers;  // kernel arguments (operands then results)
    GemmPlan plan;
    void *a = nullptr, *b = nullptr, *c = nullptr;
    std::string what;  // "GEMM <name>" for cuBLASLt's error messages, built once
    const GemmTuning* tuning = nullptr;  // set by the GEMM's first run
    int gemmSms = 0;  // the SMs cuBLASLt plans this GEMM for (0: all): fewer where collectives may run beside it
    // A collective: its op, one (send, receive, elements) per operand, and the event its
    // readers wait for; `waits`: the collectives (list indices) whose results this entry reads.
    const Op* collective = nullptr;
    struct Transfer {
      const void* send;
      void* recv;
      size_t count;
      DType dtype;  // each its own: a layer's gather holds bf16 copies and f32 weights
    };
    std::vector<Transfer> transfers;
    cudaEvent_t ready = nullptr, done = nullptr;
    std::vector<size_t> waits;
    // A kernel on the side stream (ir/side_stream.h): `ready` marks the compute stream's work
    // before it, `done` its end, which later entries in `waits` wait for
    // (runtime/side_stream_waits.h).
    bool side = false;
    size_t collectiveWaits = 0;  // the first entries of `waits`; the rest are side kernels'
  };
  std::vector<Entry> list;
  std::vector<LaunchInfo> infos;
  std::vector<int> kernelsPerLaunch;  // timeKernels: each launch's kernels, counted once

  int calls = 0;
  bool invariantsReady = false;  // the once-entries ran: later calls and the graph skip them
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graphExec = nullptr;

  Impl(const Graph& graph_, ExecutableOptions o) : g(graph_), opts(o) {}

  bool isolated = false;  // capturing one launch alone (timeKernels): no waits on other launches
  cudaStream_t commStream = nullptr;  // collectives (created only when the graph has some)
  cudaEvent_t commJoined = nullptr;   // the comm stream's end of a call, which the call waits for
  cudaStream_t sideStream = nullptr;  // side_stream kernels (created only when the list has some)
  cudaEvent_t sideJoined = nullptr;   // the side stream's end of a call
  cudaEvent_t callerEvent = nullptr;  // waitFor/signal: ordering against a caller's stream

  ~Impl() {
    if (graphExec) cudaGraphExecDestroy(graphExec);
    if (graph) cudaGraphDestroy(graph);
    for (Entry& e : list) {
      if (e.ready) cudaEventDestroy(e.ready);
      if (e.done) cudaEventDestroy(e.done);
    }
    if (commJoined) cudaEventDestroy(commJoined);
    if (sideJoined) cudaEventDestroy(sideJoined);
    if (sideStream) cudaStreamDestroy(sideStream);
    if (callerEvent) cudaEventDestroy(callerEvent);
    if (commStream) cudaStreamDestroy(commStream);
    if (stream) cudaStreamDestroy(stream);
  }

  // Values that live in a caller's memory instead of the resident region or the arena
  // (bindAddress, placeOutput): a source read where the caller keeps it, an output written
  // where the caller wants it. `relinkNeeded`: an address changed since the launch list was
  // resolved.
  // The source called `name`, and output i: an Error naming what is not there.
  const Value* source(const std::string& name) const {
    auto it = sources.find(name);
    if (it == sources.end()) throw Error("the program has no input or parameter '" + name + "'");
    return it->second;
  }
  const Value* output(size_t i) const {
    if (i >= g.outputs.size()) throw Error("the program has " + std::to_string(g.outputs.size()) + " outputs, not " + std::to_string(i + 1));
    return g.outputs[i];
  }
  // v lives at the caller's `device` from the next call on (a relink when that is news).
  void moveTo(const Value* v, void* device) {
    auto [slot, fresh] = external.try_emplace(v, static_cast<char*>(device));
    if (fresh || slot->second != device) {
      slot->second = static_cast<char*>(device);
      relinkNeeded = true;
    }
  }

  // Sources that must stay in their resident slot (bindAddress copies them): params an
  // in-place update writes, and params a resident concat reads as part of adjacent params.
  PtrSet<const Value*> pinned;
  std::map<const Value*, char*> external;
  std::set<const Value*> placedOutputs;  // the outputs' storage among them
  std::vector<const Value*> placeTargets;  // per output: the storage placeOutput moves, or null
  bool relinkNeeded = false;

  // The device address of a value that owns storage: a source (resident), an in-place
  // update (its param's storage) or an arena value; or the caller's, where it was given.
  char* storageAddress(const Value* v) const {
    if (auto u = updates.find(v); u != updates.end()) v = u->second;
    if (auto x = external.find(v); x != external.end()) return x->second;
    if (v->offset < 0) {
      std::string what = v->def ? std::string(v->def->info().name) : "value";
      throw Error("cannot run this graph: a " + what + " result of type " + v->type.str() +
                  " has no planned storage (run the memory-plan pass)");
    }
    // Integer arithmetic: device memory is no host array, and a slot in a region not yet
    // allocated (callerBuffers) resolves to a number that ensureAllocated makes real before
    // any launch reads it (run() relinks after allocating).
    const void* base = isSource(v) ? resident.data() : size_t(v->offset) >= topStart ? top.data() : arena.data();
    const size_t at = isSource(v) || size_t(v->offset) < topStart ? size_t(v->offset) : size_t(v->offset) - topStart;
    return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(base) + at);
  }

  // The arena's top holds only the storage of outputs a caller can have written in place
  // (memory-plan-outputs-last plans it so): from the lowest such offset on, no other value.
  // Checked here rather than assumed: a plan without that layout keeps the arena whole.
  void splitTop() {
    PtrSet<const Value*> targets;
    size_t start = arenaBytes;
    for (const Value* v : placeTargets)
      if (v) {
        targets.insert(v);
        start = std::min(start, size_t(v->offset));
      }
    for (const auto& op : g.ops)
      for (const auto& r : op->results)
        if (r->offset >= 0 && !isSource(r.get()) && !targets.count(r.get()) &&
            size_t(r->offset) + storageBytes(r->type) > start)
          return;
    topStart = start;
  }

  // The resident region and the arena's top, allocated now where callerBuffers deferred them
  // and the next call reads them (the addresses resolved so far are then stale: relinked
  // before the next launch).
  void ensureResident() {
    if (resident.data() || residentBytes == 0) return;
    resident = DeviceBuffer(residentBytes, "resident region (the program's inputs)");
    FUSEC_CUDA(cudaMemsetAsync(resident.data(), 0, residentBytes, stream), "clearing the resident region");
    relinkNeeded = true;
  }
  void ensureTop() {
    if (top.data() || arenaBytes == topStart) return;
    top = DeviceBuffer(arenaBytes - topStart, "arena (the outputs' storage)");
    FUSEC_CUDA(cudaMemsetAsync(top.data(), 0, arenaBytes - topStart, stream), "clearing the arena");
    relinkNeeded = true;
  }
  // Which regions a call reads that the caller's buffers do not stand in for: a source not
  // the caller's reads its resident slot, an output not placed its storage in the top.
  void ensureAllocated() {
    if (!resident.data())
      for (const auto& [name, v] : sources)
        if (!external.count(v)) {
          ensureResident();
          break;
        }
    if (!top.data())
      for (const Value* v : placeTargets)
        if (v && !external.count(v)) {
          ensureTop();
          break;
        }
  }

  // The device address of `v`'s first element; views resolve to their base's storage.
  char* addressOf(const Value* v, bool mustBeContiguous) const {
    auto view = resolveView(v);
    if (!view) throw Error("cannot run this graph: value of type " + v->type.str() + " is a view that needs a copy");
    if (mustBeContiguous && !isContiguousView(*view, v->type.shape))
      throw Error("cannot run this graph: a kernel operand or output of type " + v->type.str() + " is strided");
    if (view->base->def && view->base->def->kind == OpKind::Shard)  // this rank's rows of its operand
      return shardAddress(view->base) + view->offset * dtypeBytes(view->base->type.dtype);
    const Value* base = storageOf(view->base);
    return storageAddress(base) + view->offset * dtypeBytes(base->type.dtype);
  }

  // This process's rank in its job (0 without one).
  int rank() const {
#if FUSEC_HAVE_NCCL
    if (opts.communicator) return opts.communicator->rank();
#endif
    return 0;
  }

  // A shard's first element: its operand's, rank blocks of rows further on.
  char* shardAddress(const Value* shard) const {
    const Value* x = shard->def->operands.at(0);
    return addressOf(x, true) + size_t(rank()) * size_t(shard->type.numel()) * dtypeBytes(x->type.dtype);
  }

  void collectSources() {
    for (const auto& op : g.ops)
      if (op->kind == OpKind::Input || op->kind == OpKind::Param) {
        const Value* v = op->result();
        const std::string& name = op->attrStr("name");
        sources[name] = v;
        unbound.insert(name);
        if (v->offset < 0) throw Error("cannot run this graph: source '" + name + "' has no planned storage (run the memory-plan pass)");
        residentBytes = std::max(residentBytes, size_t(v->offset) + storageBytes(v->type));
      }
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (!g.updateOf(i).empty()) {
        updates[g.outputs[i]] = sources.at(g.updateOf(i));
        pinned.insert(sources.at(g.updateOf(i)));
      }
    for (const auto& op : g.ops)  // a resident concat: a view of adjacent params (no offset of its own)
      if (op->kind == OpKind::Concat && op->result()->offset < 0)
        for (const Value* x : op->operands) pinned.insert(x);
    for (const auto& op : g.ops) {
      if (op->kind == OpKind::Input || op->kind == OpKind::Param) continue;
      for (const auto& r : op->results)
        if (r->offset >= 0) arenaBytes = std::max(arenaBytes, size_t(r->offset) + storageBytes(r->type));
    }
    residentBytes = roundUp(residentBytes, kAllocAlign);
    arenaBytes = roundUp(arenaBytes, kAllocAlign);
  }

  // Top-level ops that launch nothing must be views or resident concats.
  void checkTopLevel() const {
    for (const auto& op : g.ops) {
      switch (op->kind) {
        case OpKind::Input:
        case OpKind::Param:
        case OpKind::Matmul:
        case OpKind::Kernel: continue;
        case OpKind::AllReduce:
        case OpKind::ReduceScatter:
        case OpKind::AllGather:
        case OpKind::Shard:
          if (!opts.communicator && op->attrInt("ranks") != 1)
            throw Error("cannot run this graph: it has " + std::string(op->info().name) + " over " +
                        std::to_string(op->attrInt("ranks")) + " ranks, and this process is not a rank of a data-parallel job "
                        "(fusec run --gpus N, or torchrun's RANK and WORLD_SIZE)");
          continue;
        case OpKind::Concat:
          if (op->result()->offset < 0) continue;  // a resident concat: a view of adjacent params
          throw Error("cannot run this graph: a concat of type " + op->result()->type.str() +
                      " needs a copy the runtime does not make (its params are not adjacent)");
        default:
          if (isViewOp(op->kind)) continue;
          throw Error("cannot run this graph: top-level op '" + std::string(op->info().name) +
                      "' is neither a view, a GEMM nor a kernel (run the fuse pass)");
      }
    }
  }

  // deviceSms: the GPU's SM count, of which a GEMM launched after the first collective leaves
  // the communicator's reservedSms() to NCCL (that collective, or a later one, may be running).
  void buildLaunchList(const std::vector<codegen::GeneratedKernel>& generated, int deviceSms) {
    int reserved = 0;  // without NCCL there is no communicator
#if FUSEC_HAVE_NCCL
    if (opts.communicator) reserved = opts.communicator->reservedSms();
#endif
    bool collectiveBefore = false;
    std::map<const Op*, const codegen::GeneratedKernel*> genOf;
    {
      size_t k = 0;
      for (const auto& op : g.ops)
        if (op->kind == OpKind::Kernel) genOf[op.get()] = &generated.at(k++);
    }
    int gemmCount = 0;
    for (const auto& op : g.ops) {
      const size_t before = list.size();
      if (op->kind == OpKind::Kernel) {
        const codegen::GeneratedKernel& gk = *genOf.at(op.get());
        Entry e;
        e.info = {LaunchInfo::Kind::Kernel, gk.name, gk.family, 0, 0, std::nullopt};
        e.kernel = &kernels->find(gk.name);
        e.op = op.get();
        resolve(e);
        if (e.pointers.size() != e.kernel->arity)
          throw Error("internal: kernel " + gk.name + " takes " + std::to_string(e.kernel->arity) + " pointers, has " +
                      std::to_string(e.pointers.size()));
        list.push_back(std::move(e));
      } else if (op->kind == OpKind::Matmul) {
        Entry e;
        e.plan = planGemm(*op);
        const Value* r = op->result();
        std::string name = r->name.empty() ? "matmul" + std::to_string(gemmCount) : "%" + r->name;
        ++gemmCount;
        e.info = {LaunchInfo::Kind::Gemm, name + " (" + std::to_string(e.plan.M) + "x" + std::to_string(e.plan.N) + "x" +
                                              std::to_string(e.plan.K) + (e.plan.batch * int64_t(e.plan.launches.size()) > 1
                                                                              ? " x" + std::to_string(e.plan.batch * int64_t(e.plan.launches.size()))
                                                                              : "") + ")",
                  KernelFamily::Pointwise, e.plan.flops(), int64_t(e.plan.launches.size()), std::nullopt};
        e.what = "GEMM " + e.info.name;
        for (const Value* base : {e.plan.a.base, e.plan.b.base, e.plan.c.base})
          if (base->def && base->def->kind == OpKind::Shard)
            throw Error("cannot run this graph: GEMM " + e.info.name + " reads a rank's shard (only kernels read shards)");
        e.op = op.get();
        resolve(e);
        if (collectiveBefore && reserved > 0 && reserved < deviceSms) e.gemmSms = deviceSms - reserved;
        list.push_back(std::move(e));
      } else if (communicates(op->kind)) {
        list.push_back(collectiveEntry(*op));
        collectiveBefore = true;
      }
      if (list.size() > before) {
        if (isStepInvariant(*op)) list.back().info.once = true;
        list.back().waits = collectivesReadBy(*op);
        list.back().collectiveWaits = list.back().waits.size();
      }
    }
    if (opts.sideStream && !opts.callerBuffers && sideStreamAllowedByEnv()) placeSideEntries();
    for (const Entry& e : list) infos.push_back(e.info);
  }

  // The storage `v` lives in, whole (through views to the base; a shard's operand): what a
  // launch reading or writing `v` may touch, as far as ordering against the side stream goes.
  Span storageSpan(const Value* v) const {
    auto view = resolveView(v);
    if (!view) return {0, ~uintptr_t(0)};
    const Value* base = view->base;
    if (base->def && base->def->kind == OpKind::Shard) return storageSpan(base->def->operands.at(0));
    const Value* s = storageOf(base);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(storageAddress(s));
    return {lo, lo + size_t(s->type.numel()) * dtypeBytes(s->type.dtype)};
  }

  // Kernels recorded side_stream go to the side stream (not a step-invariant one, nor one that
  // waits for a collective: its waits are on the compute stream); every later entry on the
  // compute stream waits for the side kernel runtime/side_stream_waits.h names, from the
  // storage each entry's operands and results span (whole base buffers).
  void placeSideEntries() {
    std::vector<LaunchAccess> access(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      Entry& e = list[i];
      e.waits.resize(e.collectiveWaits);  // again after a relink: the addresses moved
      e.side = e.kernel && e.op->attrBool("side_stream") && e.waits.empty() && !e.info.once;
      access[i].side = e.side;
      for (const Value* v : e.op->operands) access[i].reads.push_back(storageSpan(v));
      for (const auto& r : e.op->results) access[i].writes.push_back(storageSpan(r.get()));
    }
    const std::vector<long> waits = sideStreamWaits(access);
    for (size_t i = 0; i < list.size(); ++i)
      if (waits[i] >= 0) list[i].waits.push_back(size_t(waits[i]));
    bool any = false;
    for (Entry& e : list)
      if (e.side) {
        any = true;
        if (!e.ready) FUSEC_CUDA(cudaEventCreateWithFlags(&e.ready, cudaEventDisableTiming), "creating the side stream's events");
        if (!e.done) FUSEC_CUDA(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming), "creating the side stream's events");
      }
    if (!any || sideStream) return;
    // The lowest priority: the compute stream's queued blocks go first, the side stream's fill
    // the SMs they leave (a small batch's GEMMs leave many).
    int least = 0, greatest = 0;
    FUSEC_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "creating the side stream");
    FUSEC_CUDA(cudaStreamCreateWithPriority(&sideStream, cudaStreamNonBlocking, least), "creating the side stream");
    FUSEC_CUDA(cudaEventCreateWithFlags(&sideJoined, cudaEventDisableTiming), "creating the side stream");
  }

  // Which collectives' results `op` reads (through views): list indices of their entries.
  std::map<const Op*, size_t> collectiveEntryOf;
  std::vector<size_t> collectivesReadBy(const Op& op) {
    std::vector<size_t> out;
    if (communicates(op.kind)) collectiveEntryOf[&op] = list.size() - 1;
    for (const Value* v : op.operands) {
      while (v->def && isViewOp(v->def->kind)) v = v->def->operands.at(0);
      if (auto it = collectiveEntryOf.find(v->def); it != collectiveEntryOf.end() && it->first != &op)
        if (std::find(out.begin(), out.end(), it->second) == out.end()) out.push_back(it->second);
    }
    return out;
  }

  // Every device address of entry e, from its op: at construction, and again when a caller
  // moved a value (relink).
  void resolve(Entry& e) {
    const Op& op = *e.op;
    if (e.collective) {
      e.transfers.clear();
      for (size_t k = 0; k < op.operands.size(); ++k) {
        const Value* x = op.operands[k];
        const Value* y = op.results.at(k).get();
        e.transfers.push_back({addressOf(x, true), addressOf(y, true), size_t(x->type.numel()), x->type.dtype});
      }
    } else if (e.kernel) {
      e.pointers.clear();
      for (const Value* v : op.operands) e.pointers.push_back(addressOf(v, true));
      for (const auto& r : op.results) e.pointers.push_back(storageAddress(r.get()));
    } else {
      e.a = storageAddress(storageOf(e.plan.a.base));
      e.b = storageAddress(storageOf(e.plan.b.base));
      e.c = storageAddress(storageOf(e.plan.c.base));
    }
  }

  // The launch list re-resolved after a caller moved a value. A captured graph is updated in
  // place where CUDA allows (same launches, new arguments), else captured again; a program
  // with step-invariant launches computes them again first (their operands may have moved).
  RelinkCounts counts;

  // relinkNeeded stays set until it succeeds: a capture that throws leaves it for the next call.
  void relink() {
    ++counts.relinks;
    for (Entry& e : list) resolve(e);
    if (sideStream) placeSideEntries();
    bool once = false;
    for (const Entry& e : list) once = once || e.info.once;
    if (once) {  // with or without a graph: the invariants' operands may have moved
      invariantsReady = false;
      if (graphExec) {
        dropGraph();
        ++counts.graphRebuilds;
      }
      calls = 0;  // the next call launches directly (the once-entries too), the one after captures
      relinkNeeded = false;
      return;
    }
    if (!graphExec) {
      relinkNeeded = false;
      return;
    }
    // Captured without instantiating: cudaGraphExecUpdate takes the new graph's arguments.
    cudaGraph_t fresh = record(0, list.size());
    cudaGraphExecUpdateResultInfo info{};
    relinkNeeded = false;
    if (cudaGraphExecUpdate(graphExec, fresh, &info) == cudaSuccess) {
      cudaGraphDestroy(graph);
      graph = fresh;
      ++counts.graphUpdates;
      return;
    }
    cudaGetLastError();
    cudaGraphDestroy(fresh);
    dropGraph();
    ++counts.graphRebuilds;  // the next call captures and instantiates anew
  }

  void dropGraph() {
    if (graphExec) cudaGraphExecDestroy(graphExec);
    if (graph) cudaGraphDestroy(graph);
    graphExec = nullptr;
    graph = nullptr;
  }

  Entry collectiveEntry(const Op& op) {
    Entry e;
    e.collective = &op;
    e.op = &op;
    resolve(e);
    int64_t bytes = 0;
    for (const Value* x : op.operands) bytes += x->type.numel() * int64_t(dtypeBytes(x->type.dtype));
    char mb[32];
    std::snprintf(mb, sizeof mb, "%.1f MB", double(bytes) / 1e6);
    const size_t n = op.operands.size();
    e.info = {LaunchInfo::Kind::Collective,
              std::string(op.info().name) + " " + (n > 1 ? std::to_string(n) + " tensors, " : "") + mb,
              KernelFamily::Pointwise, 0, 0, std::nullopt};
    e.info.bytes = bytes;
    FUSEC_CUDA(cudaEventCreateWithFlags(&e.ready, cudaEventDisableTiming), "creating a collective's events");
    FUSEC_CUDA(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming), "creating a collective's events");
    return e;
  }

  // Enqueues a collective on the comm stream after the compute that made its operands.
  void launchCollective(Entry& e) {
#if FUSEC_HAVE_NCCL
    const Op& op = *e.collective;
    FUSEC_CUDA(cudaEventRecord(e.ready, stream), "ordering " + e.info.name);
    FUSEC_CUDA(cudaStreamWaitEvent(commStream, e.ready, 0), "ordering " + e.info.name);
    Communicator& c = *opts.communicator;
    c.groupStart();
    for (const Entry::Transfer& t : e.transfers) {
      if (op.kind == OpKind::AllReduce) c.allReduce(t.send, t.recv, t.count, t.dtype, op.attrStr("reduce") == "mean", commStream);
      else if (op.kind == OpKind::ReduceScatter)
        c.reduceScatter(t.send, t.recv, t.count / size_t(c.ranks()), t.dtype, op.attrStr("reduce") == "mean", commStream);
      else c.allGather(t.send, t.recv, t.count, t.dtype, commStream);
    }
    c.groupEnd();
    FUSEC_CUDA(cudaEventRecord(e.done, commStream), "ordering " + e.info.name);
#else
    (void)e;
    throw Error("this fusec was built without NCCL (nccl.h not found): it cannot run collectives");
#endif
  }

  // The side and comm streams' work so far joins the compute stream (a call's end; a graph
  // capture must end with every stream it forked joined).
  void joinStreams() {
    if (sideStream) {
      FUSEC_CUDA(cudaEventRecord(sideJoined, sideStream), "joining the side stream");
      FUSEC_CUDA(cudaStreamWaitEvent(stream, sideJoined, 0), "joining the side stream");
    }
    if (!commStream) return;
    FUSEC_CUDA(cudaEventRecord(commJoined, commStream), "joining the collectives");
    FUSEC_CUDA(cudaStreamWaitEvent(stream, commJoined, 0), "joining the collectives");
  }

  void launch(Entry& e, bool check) {
    if (!isolated)
      for (size_t w : e.waits)  // the results of a collective it reads
        FUSEC_CUDA(cudaStreamWaitEvent(stream, list[w].done, 0), "waiting for " + list[w].info.name);
    if (e.collective) {
      launchCollective(e);
    } else if (e.kernel) {
      void* args[64];
      std::vector<void*> many;
      void** argv = args;
      if (e.pointers.size() > 64) {
        many.resize(e.pointers.size());
        argv = many.data();
      }
      for (size_t i = 0; i < e.pointers.size(); ++i) argv[i] = &e.pointers[i];
      if (e.side && !isolated) {  // after the compute stream's work so far, beside what follows
        FUSEC_CUDA(cudaEventRecord(e.ready, stream), "ordering " + e.info.name);
        FUSEC_CUDA(cudaStreamWaitEvent(sideStream, e.ready, 0), "ordering " + e.info.name);
        launchKernel(*e.kernel, argv, sideStream, false);
        FUSEC_CUDA(cudaEventRecord(e.done, sideStream), "ordering " + e.info.name);
      } else {
        // A dependent of the kernel before it in this stream, unless it also waits for a
        // collective's or a side kernel's event (a programmatic edge is between two kernels of
        // one stream).
        launchKernel(*e.kernel, argv, stream, isolated || e.waits.empty());
      }
    } else {
      e.tuning = &gemm->run(e.plan, e.a, e.b, e.c, stream, e.what, e.gemmSms);
    }
    if (check) {
      cudaError_t s = opts.syncEachLaunch ? cudaStreamSynchronize(stream) : cudaGetLastError();
      if (s != cudaSuccess) {
        cudaGetLastError();
        throw Error("CUDA error in " + e.info.name + ": " + cudaGetErrorString(s));
      }
    }
  }

  // Whether entry e runs now: a once-entry only until the invariants are computed.
  bool runs(const Entry& e) const { return !e.info.once || !invariantsReady; }

  void launchAll(bool check) {
    for (Entry& e : list)
      if (runs(e)) launch(e, check);
    joinStreams();
    invariantsReady = true;
  }

  // After the first direct run every GEMM has its algorithm: show the choices in launches()
  // and save what was tuned (best effort; the warm-up is never inside a capture).
  void publishTuning() {
    if (tuningPublished) return;
    tuningPublished = true;
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].tuning) infos[i].gemmTuning = *list[i].tuning;
    gemmTuning->save();
  }

  // Records list[from, to) as one CUDA graph (not instantiated).
  cudaGraph_t record(size_t from, size_t to) {
    FUSEC_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capturing the step as a CUDA graph");
    try {
      for (size_t i = from; i < to; ++i)
        if (runs(list[i])) launch(list[i], false);
      // One launch captured alone (timeKernels) runs on the compute stream: the side and comm
      // streams are not in this capture, and waiting on them would tie the graph to uncaptured work.
      if (!isolated) joinStreams();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    FUSEC_CUDA(cudaStreamEndCapture(stream, &graph), "capturing the step as a CUDA graph");
    return graph;
  }

  // Captures list[from, to) as one CUDA graph into `into` and instantiates it into `exec`.
  void capture(size_t from, size_t to, cudaGraph_t& into, cudaGraphExec_t& exec) {
    into = record(from, to);
    // With collectives, the graph keeps each node's stream priority (the comm stream's is the
    // highest): without the flag every node runs at the launching stream's priority, and a
    // bucket's reduction waits behind the backward's queued blocks.
    const unsigned long long flags =
        (commStream || sideStream) && nodePriorityAllowedByEnv() ? cudaGraphInstantiateFlagUseNodePriority : 0;
    FUSEC_CUDA(cudaGraphInstantiate(&exec, into, flags), "instantiating the step's CUDA graph");
  }
};

Executable::Executable(const Graph& g, ExecutableOptions opts) : impl_(std::make_unique<Impl>(g, opts)) {
  Impl& m = *impl_;
  const bool autotune = opts.gemmAutotune && autotuneAllowedByEnv();
  DeviceInfo dev = openDevice();
  if (dev.target.major != 9)
    throw Error("fusec generates sm_90 (Hopper) kernels; device 0 (" + dev.name + ") is " + dev.target.arch());
  m.checkTopLevel();
  m.collectSources();

  // Memory first: a step that cannot fit fails before any compile or allocation.
  GemmOptions gemmOpts;
  gemmOpts.tf32 = opts.tf32;
  gemmOpts.autotune = autotune;
  m.placeTargets = outputPlacements(g);
  m.topStart = m.arenaBytes;
  if (opts.callerBuffers) m.splitTop();
  const size_t need = (opts.callerBuffers ? 0 : m.residentBytes) + m.topStart + gemmOpts.workspaceBytes;
  if (need > dev.freeBytes) throw Error(outOfMemoryMessage(need, dev.freeBytes));
  if (!opts.callerBuffers)
    m.resident = DeviceBuffer(m.residentBytes, "resident region (weights and optimizer state)");
  m.arena = DeviceBuffer(m.topStart, "arena");
  // Zeroed once: a plan bug then reads zeros, not stale data from another process.
  if (m.resident.data()) FUSEC_CUDA(cudaMemset(m.resident.data(), 0, m.residentBytes), "clearing the resident region");
  if (m.topStart) FUSEC_CUDA(cudaMemset(m.arena.data(), 0, m.topStart), "clearing the arena");

  FUSEC_CUDA(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking), "creating the step's stream");
  if (opts.communicator) {
    // Higher priority than the compute: a bucket's reduction starts as soon as it is ready
    // and its few SMs are not starved by the backward's kernels.
    int least = 0, greatest = 0;
    FUSEC_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "creating the collectives' stream");
    FUSEC_CUDA(cudaStreamCreateWithPriority(&m.commStream, cudaStreamNonBlocking, greatest), "creating the collectives' stream");
    FUSEC_CUDA(cudaEventCreateWithFlags(&m.commJoined, cudaEventDisableTiming), "creating the collectives' stream");
  }
  // The tuning cache sits beside the cubin cache: one file per device and cuBLASLt version.
  // Shared by the process's Executables (one choice per GEMM key); without a cubin cache, in
  // memory only.
  m.gemmTuning = &GemmTuningCache::shared(autotune && opts.cache ? opts.cache->dir() : std::string(), dev.name,
                                          dev.target.major * 10 + dev.target.minor, uint64_t(cublasLtGetVersion()));
  gemmOpts.tuningCache = m.gemmTuning;
  m.gemm = std::make_unique<CublasLtGemm>(gemmOpts);
  std::vector<codegen::GeneratedKernel> generated = codegen::generateFunction(g, dev.target);
  m.kernels = std::make_unique<KernelModule>(generated, compileImages(generated, opts.cache, dev.target));
  m.buildLaunchList(generated, dev.target.sms);
}

Executable::~Executable() = default;

size_t Executable::bind(const Bindings& values) {
  size_t n = 0;
  for (const auto& [name, t] : values)
    if (impl_->sources.count(name)) {
      bind(name, t);
      ++n;
    }
  return n;
}

void Executable::bind(const std::string& name, const HostTensor& value) {
  Impl& m = *impl_;
  auto it = m.sources.find(name);
  if (it == m.sources.end()) throw Error("the program has no input or parameter '" + name + "'");
  const Type& want = it->second->type;
  const bool convertible = value.type.dtype == want.dtype ||
                           (value.type.dtype == DType::f32 && (want.dtype == DType::bf16 || want.dtype == DType::f16));
  if (value.type.shape != want.shape || !convertible)
    throw Error("'" + name + "' is " + value.type.str() + ", expected " + want.str());
  std::vector<uint8_t> bytes = toStorage(value, want.dtype);
  if (!m.external.count(it->second)) m.ensureResident();
  FUSEC_CUDA(cudaMemcpyAsync(m.storageAddress(it->second), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, m.stream),
             "uploading '" + name + "'");
  // `bytes` dies here: wait for the copy (binding is not on the per-step hot path).
  FUSEC_CUDA(cudaStreamSynchronize(m.stream), "uploading '" + name + "'");
  m.unbound.erase(name);
}

bool Executable::bindAddress(const std::string& name, void* device) {
  Impl& m = *impl_;
  const Value* v = m.source(name);
  // In place only where nothing else assumes the resident slot: a param that an in-place
  // update writes, or that a resident concat reads as part of its adjacent params, is copied.
  const bool placeable = reinterpret_cast<uintptr_t>(device) % kAllocAlign == 0 && !m.pinned.count(v);
  if (!placeable) {
    if (m.external.erase(v)) m.relinkNeeded = true;  // back in its own slot
    return false;
  }
  m.moveTo(v, device);
  m.unbound.erase(name);
  return true;
}

void Executable::copyInput(const std::string& name, const void* device) {
  Impl& m = *impl_;
  const Value* v = m.source(name);
  if (m.external.erase(v)) m.relinkNeeded = true;  // back in its resident slot
  m.ensureResident();
  FUSEC_CUDA(cudaMemcpyAsync(m.storageAddress(v), device, storageBytes(v->type), cudaMemcpyDeviceToDevice, m.stream),
             "copying input '" + name + "'");
  m.unbound.erase(name);
}

bool Executable::placeOutput(size_t i, void* device) {
  Impl& m = *impl_;
  m.output(i);  // an Error for an index past the outputs
  const Value* storage = m.placeTargets.at(i);  // passes/output_placement.h: which outputs can be
  if (!storage || reinterpret_cast<uintptr_t>(device) % kAllocAlign != 0) {
    unplaceOutput(i);  // a source returned as an output keeps the address bindAddress gave it
    return false;
  }
  m.moveTo(storage, device);
  m.placedOutputs.insert(storage);
  return true;
}

void Executable::unplaceOutput(size_t i) {
  Impl& m = *impl_;
  m.output(i);
  const Value* storage = m.placeTargets.at(i);
  if (storage && m.placedOutputs.erase(storage) && m.external.erase(storage)) m.relinkNeeded = true;
}

void Executable::copyOutput(size_t i, void* device) {
  Impl& m = *impl_;
  const Value* v = m.output(i);
  FUSEC_CUDA(cudaMemcpyAsync(device, m.addressOf(v, true), storageBytes(v->type), cudaMemcpyDeviceToDevice, m.stream),
             "copying output " + std::to_string(i));
}

void Executable::waitFor(void* callerStream) {
  Impl& m = *impl_;
  if (!m.callerEvent) FUSEC_CUDA(cudaEventCreateWithFlags(&m.callerEvent, cudaEventDisableTiming), "creating an event");
  FUSEC_CUDA(cudaEventRecord(m.callerEvent, static_cast<cudaStream_t>(callerStream)), "ordering after the caller's stream");
  FUSEC_CUDA(cudaStreamWaitEvent(m.stream, m.callerEvent, 0), "ordering after the caller's stream");
}

void Executable::signal(void* callerStream) {
  Impl& m = *impl_;
  if (!m.callerEvent) FUSEC_CUDA(cudaEventCreateWithFlags(&m.callerEvent, cudaEventDisableTiming), "creating an event");
  FUSEC_CUDA(cudaEventRecord(m.callerEvent, m.stream), "ordering the caller's stream after the step");
  FUSEC_CUDA(cudaStreamWaitEvent(static_cast<cudaStream_t>(callerStream), m.callerEvent, 0),
             "ordering the caller's stream after the step");
}

void Executable::run() {
  Impl& m = *impl_;
  // (Which sources and outputs are the caller's changes only with a relink: looked at then.)
  if (m.relinkNeeded) m.ensureAllocated();
  if (m.relinkNeeded) m.relink();
  if (!m.unbound.empty()) throw Error("the program's input or parameter '" + *m.unbound.begin() + "' was never bound");
  if (!m.opts.cudaGraph || m.calls == 0) {
    m.launchAll(true);  // warm-up (or every call without a graph): checked launch by launch
    m.publishTuning();
  } else {
    if (!m.graphExec) m.capture(0, m.list.size(), m.graph, m.graphExec);
    FUSEC_CUDA(cudaGraphLaunch(m.graphExec, m.stream), "launching the step's CUDA graph");
  }
  ++m.calls;
}

void Executable::synchronize() {
#if FUSEC_HAVE_NCCL
  if (impl_->opts.communicator) {  // never an endless wait on a peer that died or hangs
    impl_->opts.communicator->synchronize(impl_->stream, "the step");
    return;
  }
#endif
  cudaError_t s = cudaStreamSynchronize(impl_->stream);
  if (s != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("CUDA error while running the step: ") + cudaGetErrorString(s) +
                " (rerun with --no-cuda-graph and FUSEC_SYNC_LAUNCHES=1 to name the launch)");
  }
}

HostTensor Executable::output(size_t i) {
  Impl& m = *impl_;
  if (i >= m.g.outputs.size()) throw Error("the program has " + std::to_string(m.g.outputs.size()) + " outputs, not " + std::to_string(i + 1));
  const Value* v = m.g.outputs[i];
  if (m.placeTargets.at(i) && !m.external.count(m.placeTargets[i])) m.ensureTop();  // read before any call
  synchronize();
  std::vector<uint8_t> bytes(storageBytes(v->type));
  FUSEC_CUDA(cudaMemcpy(bytes.data(), m.addressOf(v, true), bytes.size(), cudaMemcpyDeviceToHost), "reading output " + std::to_string(i));
  return fromStorage(v->type, bytes);
}

HostTensor Executable::read(const std::string& name) {
  Impl& m = *impl_;
  auto it = m.sources.find(name);
  if (it == m.sources.end()) throw Error("the program has no input or parameter '" + name + "'");
  synchronize();
  const Value* v = it->second;
  const int64_t ranks = v->def->kind == OpKind::Param ? v->def->attrInt("ranks") : 1;
  if (ranks > 1) return readWhole(*v, ranks);
  std::vector<uint8_t> bytes(storageBytes(v->type));
  if (!m.external.count(v)) m.ensureResident();
  FUSEC_CUDA(cudaMemcpy(bytes.data(), m.storageAddress(v), bytes.size(), cudaMemcpyDeviceToHost), "reading '" + name + "'");
  return fromStorage(v->type, bytes);
}

// A param that holds this rank's rows (passes/shard_master_weights.cpp): the ranks gather their
// rows into the whole weight, so every rank must read it, in the same order.
HostTensor Executable::readWhole(const Value& param, int64_t ranks) {
  Impl& m = *impl_;
  const std::string& name = param.def->attrStr("name");
  Type whole = param.type;
  whole.shape.at(0) *= ranks;
#if FUSEC_HAVE_NCCL
  Communicator* c = m.opts.communicator;
  if (!c || c->ranks() != ranks)
    throw Error("the program's param '" + name + "' holds one rank's rows of " + std::to_string(ranks) +
                " ranks; reading it whole needs the job's communicator");
  std::vector<uint8_t> bytes(storageBytes(whole));
  void* gathered = nullptr;
  FUSEC_CUDA(cudaMalloc(&gathered, bytes.size()), "gathering '" + name + "'");
  try {
    c->allGather(m.storageAddress(&param), gathered, size_t(param.type.numel()), param.type.dtype, m.stream);
    c->synchronize(m.stream, "gathering '" + name + "'");
    FUSEC_CUDA(cudaMemcpy(bytes.data(), gathered, bytes.size(), cudaMemcpyDeviceToHost), "reading '" + name + "'");
  } catch (...) {
    cudaFree(gathered);
    throw;
  }
  FUSEC_CUDA(cudaFree(gathered), "gathering '" + name + "'");
  return fromStorage(whole, bytes);
#else
  (void)m;
  throw Error("the program's param '" + name + "' holds one rank's rows of " + std::to_string(ranks) +
              "; this fusec was built without NCCL (nccl.h not found)");
#endif
}

const std::vector<LaunchInfo>& Executable::launches() const { return impl_->infos; }

std::vector<float> Executable::timeLaunches() {
  Impl& m = *impl_;
  if (!m.unbound.empty()) throw Error("the program's input or parameter '" + *m.unbound.begin() + "' was never bound");
  std::vector<cudaEvent_t> events(m.list.size() + 1);
  for (auto& e : events) FUSEC_CUDA(cudaEventCreate(&e), "creating timing events");
  std::vector<float> ms(m.list.size());
  try {
    // A once-entry that no longer runs takes no time (its events are not even recorded).
    std::vector<bool> ran(m.list.size());
    FUSEC_CUDA(cudaEventRecord(events[0], m.stream), "timing launches");
    for (size_t i = 0; i < m.list.size(); ++i) {
      ran[i] = m.runs(m.list[i]);
      if (ran[i]) m.launch(m.list[i], true);
      FUSEC_CUDA(cudaEventRecord(events[i + 1], m.stream), "timing launches");
    }
    m.joinStreams();
    m.invariantsReady = true;
    synchronize();
    m.publishTuning();
    for (size_t i = 0; i < m.list.size(); ++i)
      if (ran[i]) FUSEC_CUDA(cudaEventElapsedTime(&ms[i], events[i], events[i + 1]), "timing launches");
  } catch (...) {
    for (auto& e : events) cudaEventDestroy(e);
    throw;
  }
  for (auto& e : events) cudaEventDestroy(e);
  return ms;
}

std::vector<float> Executable::timeKernels(KernelActivity& activity, StepOverlap* overlap) {
  Impl& m = *impl_;
  if (!m.graphExec) throw Error("timing kernels needs the step's CUDA graph: run() the program twice first");
  synchronize();
  activity.start();
  try {
    activity.take();  // nothing from before
    if (m.kernelsPerLaunch.empty()) {
      // Each launch runs as a graph of its own: a graph may run a memset as a kernel node, so
      // kernels are counted as the step's graph will run them. A generated kernel runs its
      // steps; a GEMM at least one kernel per cuBLASLt call (split-K may add a reduction).
      std::vector<int> counts;
      for (size_t i = 0; i < m.list.size(); ++i) {
        const Impl::Entry& e = m.list[i];
        if (!m.runs(e)) {  // a step-invariant value, computed at the first call: not in the graph
          counts.push_back(0);
          continue;
        }
        if (e.collective) {  // needs its peers, so never run alone: NCCL runs one kernel a group call
          counts.push_back(1);
          continue;
        }
        cudaGraph_t one = nullptr;
        cudaGraphExec_t oneExec = nullptr;
        try {
          m.isolated = true;
          m.capture(i, i + 1, one, oneExec);
          m.isolated = false;
          FUSEC_CUDA(cudaGraphLaunch(oneExec, m.stream), "launching '" + e.info.name + "' alone");
          synchronize();
        } catch (...) {
          m.isolated = false;
          if (oneExec) cudaGraphExecDestroy(oneExec);
          if (one) cudaGraphDestroy(one);
          throw;
        }
        cudaGraphExecDestroy(oneExec);
        cudaGraphDestroy(one);
        counts.push_back(int(activity.take().size()));
        const size_t least = e.kernel ? e.kernel->steps.size() : e.collective ? 1 : e.plan.launches.size();
        if (size_t(counts.back()) < least || (e.kernel && size_t(counts.back()) != least))
          throw Error("CUPTI recorded " + std::to_string(counts.back()) + " kernels for launch '" + e.info.name +
                      "', which runs " + (e.kernel ? "" : "at least ") + std::to_string(least));
      }
      m.kernelsPerLaunch = std::move(counts);
    }
    FUSEC_CUDA(cudaGraphLaunch(m.graphExec, m.stream), "launching the step's CUDA graph");
    synchronize();
    std::vector<KernelSpan> spans = activity.take();
    activity.stop();
    if (overlap) *overlap = stepOverlap(spans);
    std::vector<bool> onComm;
    if (m.commStream)
      for (const Impl::Entry& e : m.list) onComm.push_back(e.collective != nullptr);
    return launchTimesFromSpans(std::move(spans), m.kernelsPerLaunch, onComm);
  } catch (...) {
    try {
      activity.stop();
    } catch (...) {
    }
    throw;
  }
}

Executable::RelinkCounts Executable::relinkCounts() const { return impl_->counts; }
size_t Executable::arenaBytes() const { return impl_->arenaBytes; }
size_t Executable::residentBytes() const { return impl_->residentBytes; }
size_t Executable::allocatedBytes() const {
  return impl_->resident.bytes() + impl_->arena.bytes() + impl_->top.bytes();
}
bool Executable::graphCaptured() const { return impl_->graphExec != nullptr; }
void* Executable::stream() const { return impl_->stream; }

}  // namespace fusec::rt
