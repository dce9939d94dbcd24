/* fusec's C interface: compile a .fir function once, then run it on memory the caller owns.
 * It is what a framework in another language binds (frontend/python/fusec/runtime.py opens
 * libfusec_c.so with ctypes for the torch.compile backend): no C++ types cross it, and the
 * tensors stay the caller's.
 *
 *   fusec_program* p = fusec_compile(fir_text, "cuda", err, sizeof err);
 *   fusec_run(p, sources, outputs, stream, err, sizeof err);   // as often as needed
 *   fusec_destroy(p);
 *
 * Sources are the function's inputs and params in program order, outputs its results in
 * order; the caller allocates both with the types fusec_source_type/fusec_output_type name,
 * contiguous, in fusec's device layout (f32 as float, bf16/f16 as 16-bit patterns, i64/i32
 * at their width, bool as one byte). On "cuda" the pointers are device memory and the call
 * is ordered on `stream` (a cudaStream_t; 0 is the legacy default stream): it starts after
 * the work enqueued there so far, and work enqueued there afterwards starts after it. Aligned
 * sources are read in place and aligned outputs written in place (no copy); the step replays
 * as one CUDA graph, updated when an address changes. On "cpu" the pointers are host memory,
 * the CPU interpreter runs the function, and the call is synchronous.
 * Errors: every function that can fail returns NULL or nonzero and writes one line into
 * `error` (truncated to error_size). */
#ifndef FUSEC_C_API_H
#define FUSEC_C_API_H
#include <stddef.h>

#if defined(__GNUC__)
#define FUSEC_C_API __attribute__((visibility("default")))
#else
#define FUSEC_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fusec_program fusec_program;

/* Parses `fir_text` (its first function), verifies it and lowers it with the optimisation
 * pipeline (what `fusec compile --fir` runs after the program passes); on "cuda", compiles
 * its kernels (NVRTC, through the on-disk cubin cache) and allocates its memory. `options`:
 * NULL or "" for the defaults, else comma-separated key=value: passes=<pipeline> (as
 * --passes), cuda_graph=0|1, copy_after_moves=N (a buffer whose address changed N times is
 * copied from then on instead of used in place, so the CUDA graph stops changing; default 3,
 * 0 never), zero_copy=0|1|inputs|outputs (which are used in place;
 * the rest are copied to and from fusec's own memory: for debugging), dump=<file> (the lowered IR is written there). */
FUSEC_C_API fusec_program* fusec_compile(const char* fir_text, const char* device, const char* options, char* error,
                                         size_t error_size);
FUSEC_C_API size_t fusec_num_sources(const fusec_program* p);
FUSEC_C_API const char* fusec_source_name(const fusec_program* p, size_t i);
FUSEC_C_API const char* fusec_source_type(const fusec_program* p, size_t i); /* "bf16[4,256,512]" */
FUSEC_C_API size_t fusec_num_outputs(const fusec_program* p);
FUSEC_C_API const char* fusec_output_type(const fusec_program* p, size_t i);
/* The earlier output that output i is the same value as (the optimisation pipeline found two
 * results equal, e.g. one computation returned twice), or -1. A caller may pass output i the
 * same address as that one: fusec then writes it once, and copies nothing for i. */
FUSEC_C_API ptrdiff_t fusec_output_alias(const fusec_program* p, size_t i);
/* Launches (kernels and GEMMs) of one call: what the fusion left. */
FUSEC_C_API size_t fusec_num_launches(const fusec_program* p);
/* What the calls so far did, one line of key=value: calls, copied_in and copied_out (sources
 * and outputs that could not be used in place), relinks (calls whose addresses moved),
 * graph_updates and graph_rebuilds (on "cuda": how the captured CUDA graph followed them), and
 * device_bytes (on "cuda": the device memory the program holds; the sources' own slots are
 * allocated only once one is copied in: aligned sources are read where the caller keeps them).
 * Valid until the next call on p. */
FUSEC_C_API const char* fusec_stats(fusec_program* p);
FUSEC_C_API int fusec_run(fusec_program* p, const void* const* sources, void* const* outputs, void* stream, char* error,
                          size_t error_size);
FUSEC_C_API void fusec_destroy(fusec_program* p);
FUSEC_C_API const char* fusec_version(void);

#ifdef __cplusplus
}
#endif
#endif
