// NCCL's entry points that fusec calls, each forwarding to the real function of libnccl,
// opened at the first call (codegen/lazy_library.h says why): `fusec` starts, and runs every
// single-GPU command, on a machine without NCCL. The signatures are nccl.h's.
#include <nccl.h>

#include "codegen/lazy_library.h"

namespace {
FUSEC_LAZY_LIBRARY(FUSEC_NCCL_SONAME, FUSEC_NCCL_PATH)
}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) { return lazyCall<&ncclGetVersion>(library(), "ncclGetVersion", version); }
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return lazyCall<&ncclGetUniqueId>(library(), "ncclGetUniqueId", uniqueId);
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return lazyCall<&ncclCommInitRank>(library(), "ncclCommInitRank", comm, nranks, commId, rank);
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return lazyCall<&ncclCommInitRankConfig>(library(), "ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return lazyCall<&ncclCommDestroy>(library(), "ncclCommDestroy", comm); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return lazyCall<&ncclCommAbort>(library(), "ncclCommAbort", comm); }
const char* ncclGetErrorString(ncclResult_t result) {
  return lazyCall<&ncclGetErrorString>(library(), "ncclGetErrorString", result);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return lazyCall<&ncclCommGetAsyncError>(library(), "ncclCommGetAsyncError", comm, asyncError);
}
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return lazyCall<&ncclAllReduce>(library(), "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, comm, stream);
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return lazyCall<&ncclReduceScatter>(library(), "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, comm,
                                      stream);
}
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return lazyCall<&ncclAllGather>(library(), "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, comm, stream);
}
ncclResult_t ncclGroupStart() { return lazyCall<&ncclGroupStart>(library(), "ncclGroupStart"); }
ncclResult_t ncclGroupEnd() { return lazyCall<&ncclGroupEnd>(library(), "ncclGroupEnd"); }

}  // extern "C"
