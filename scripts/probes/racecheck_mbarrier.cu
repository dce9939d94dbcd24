// Does compute-sanitizer's racecheck see mbarrier arrive/wait as ordering shared-memory
// accesses between warps? R reader warps each read shared words and arrive once on an
// mbarrier of count R (lane 0, after __syncwarp); a writer warp waits on it and then
// overwrites the words, with a plain store or with cp.async (as the producer warpgroup of
// fa_backward_dkdv_wgmma_ws does). The last kernel overwrites without waiting: a real race
// that racecheck must report, so that clean others mean something. On an H100 with CUDA 13's
// compute-sanitizer: one reader (count 1) is clean with either store, eight readers (count 8,
// a correct handoff) are reported as WAR hazards, so racecheck credits the waiter with only
// part of a phase's arrivals (scripts/gpu-sanitize.sh reads this probe's verdict). Run:
//   nvcc -arch=sm_90 -o probe racecheck_mbarrier.cu &&
//   compute-sanitizer --tool racecheck --racecheck-report hazard ./probe
#include <cstdio>

__device__ unsigned smemAddr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// Mode 0: wait then st.shared; 1: wait then cp.async; 2: no wait (a race).
template <int Mode, int R>
__global__ void probe(const float* in, float* out) {
  __shared__ float word[32];
  __shared__ __align__(8) unsigned long long bar;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddr(&bar)), "r"(R));
  if (threadIdx.x < 32) word[lane] = in[lane];
  __syncthreads();
  if (warp < R) {  // a reader warp
    out[warp * 32 + lane] = word[lane];
    __syncwarp();
    if (lane == 0)
      asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smemAddr(&bar)) : "memory");
  } else {  // the writer warp
    if (Mode != 2)
      asm volatile(
          "{\n.reg .pred done;\nW:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n@!done bra W;\n}\n" ::"r"(
              smemAddr(&bar))
          : "memory");
    if (Mode == 1) {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smemAddr(&word[lane])), "l"(in + 32 + lane) : "memory");
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
      word[lane] = in[32 + lane];
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) out[R * 32 + lane] = word[lane];
}

template <int Mode, int R>
void launch(const float* in, float* out) {
  probe<Mode, R><<<1, 32 * (R + 1)>>>(in, out);
}

int main() {
  float *in, *out;
  cudaMalloc(&in, 64 * sizeof(float));
  cudaMalloc(&out, 10 * 32 * sizeof(float));
  cudaMemset(in, 0x3f, 64 * sizeof(float));
  launch<0, 1>(in, out);
  launch<1, 1>(in, out);
  launch<0, 8>(in, out);
  launch<1, 8>(in, out);
  launch<2, 1>(in, out);
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("probe kernels ran: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
