/* pt2rt C API: run a model.pt2 made by export_tools from C, or from any compiler, standard library or language that
 * calls C (clang + libc++, C# P/Invoke, Rust, Go, Swift). C99; exported from libpt2rt.so next to the C++ API.
 * docs/c-api.md describes every function.
 *
 *   pt2rt_options* opts = NULL;
 *   pt2rt_options_create(&opts);
 *   pt2rt_options_set_intra_op_threads(opts, 2);
 *   pt2rt_runtime* rt = NULL;
 *   pt2rt_status st = pt2rt_load_with_options("model.pt2", opts, &rt);
 *   pt2rt_options_free(opts);
 *   if (st != PT2RT_OK) { fprintf(stderr, "%s\n", pt2rt_last_error()); ... }
 *   int64_t shape[4] = {1, 3, 224, 224};
 *   pt2rt_tensor_view in = {pixels, shape, 4, PT2RT_FLOAT32};
 *   pt2rt_tensor* out[4]; size_t n_out = 0;
 *   if (pt2rt_run(rt, &in, 1, out, 4, &n_out) == PT2RT_OK) { ... pt2rt_tensor_data(out[0]) ...; pt2rt_tensor_free(out[0]); }
 *   pt2rt_runtime_free(rt);
 *
 * Errors: every function that can fail returns a pt2rt_status (the pt2run CLI's exit codes) and sets this thread's
 * last error message, read with pt2rt_last_error(); no C++ exception leaves the library. A NULL pointer where an
 * object is required is PT2RT_ERROR_USAGE. Accessors of an object (pt2rt_tensor_*, pt2rt_num_*) given NULL return
 * 0 / NULL.
 *
 * Ownership: what a function returns through an out-pointer (pt2rt_runtime*, pt2rt_tensor*) belongs to the caller,
 * who frees it once with the matching *_free (NULL is accepted). Pointers returned by accessors (names, shapes,
 * tensor data) belong to their object and stay valid until it is freed. The string from pt2rt_last_error() stays
 * valid until the same thread's next failing call (a successful call leaves it as it was). Input memory is borrowed for the duration of pt2rt_run() only.
 * Outputs are always in host memory (CUDA packages: copied back), dense and row-major.
 *
 * Threads: a pt2rt_runtime may be used by many threads at once (pt2rt_run is thread-safe; num_runners model
 * instances serve concurrent calls); freeing it while another thread uses it is the caller's error. Tensors are
 * immutable and may be read from any thread. The last-error message is per thread.
 *
 * Compatibility: the C API only grows. A new version adds functions, types and enum values; it never removes or
 * renames one, never changes a function's parameters or a struct's layout, and never changes what a call that
 * was valid in an earlier version does. New settings go to pt2rt_options through new setters, never as new
 * parameters. So a program built against version N runs against a library of any version >= N; it checks at run
 * time that the library it loaded speaks its version:
 *   if (pt2rt_check_c_api_version(PT2RT_C_API_VERSION) != PT2RT_OK) { ... pt2rt_last_error() ... }
 * Version 2 added pt2rt_options, pt2rt_load_with_options, pt2rt_load_from_memory and pt2rt_run_into; version 3
 * pt2rt_options_set_reuse_run_memory; version 4 pt2rt_options_set_intra_op_threads.
 */
#ifndef PT2RT_PT2RT_C_H
#define PT2RT_PT2RT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PT2RT_C_API_VERSION 4

#if defined(_WIN32)
#define PT2RT_C_EXPORT __declspec(dllimport)
#else
#define PT2RT_C_EXPORT __attribute__((visibility("default")))
#endif

typedef struct pt2rt_runtime pt2rt_runtime; /* a loaded package */
typedef struct pt2rt_tensor pt2rt_tensor;   /* an owned output */
typedef struct pt2rt_options pt2rt_options; /* how to load; NULL wherever an options pointer is taken = defaults */

/* The CLI's exit codes. */
typedef enum {
  PT2RT_OK = 0,
  PT2RT_ERROR_USAGE = 2,       /* a bad argument: NULL, an index out of range, too small an output array */
  PT2RT_ERROR_PACKAGE = 3,     /* the package is missing, damaged, not ours, or cannot run on this host */
  PT2RT_ERROR_OPS_LIBRARY = 4, /* an ops library is missing, does not load, or lacks what the package needs */
  PT2RT_ERROR_INPUT = 5,       /* an input does not match the spec (count, dtype, rank, shape, range) */
  PT2RT_ERROR_IO = 6,          /* a file cannot be read or written */
  PT2RT_ERROR_RUNTIME = 7      /* the model failed while it ran, or anything else unexpected */
} pt2rt_status;

typedef enum {
  PT2RT_FLOAT32 = 0,
  PT2RT_FLOAT64 = 1,
  PT2RT_FLOAT16 = 2,
  PT2RT_BFLOAT16 = 3,
  PT2RT_INT64 = 4,
  PT2RT_INT32 = 5,
  PT2RT_INT16 = 6,
  PT2RT_INT8 = 7,
  PT2RT_UINT8 = 8,
  PT2RT_BOOL = 9
} pt2rt_dtype;

/* Borrowed host memory: a dense, row-major tensor of ndim dims. */
typedef struct {
  const void* data;
  const int64_t* shape;
  size_t ndim;
  pt2rt_dtype dtype;
} pt2rt_tensor_view;

/* This thread's last error message ("" when none). */
PT2RT_C_EXPORT const char* pt2rt_last_error(void);
/* "ok", "usage", "package", "ops_library", "input", "io", "runtime"; "unknown" for other values. */
PT2RT_C_EXPORT const char* pt2rt_status_name(pt2rt_status status);
/* The library's version ("0.1.0") and C API version; PT2RT_ERROR_USAGE when it does not speak `header_version`
 * (it speaks every version from 1 to its own). */
PT2RT_C_EXPORT const char* pt2rt_version(void);
PT2RT_C_EXPORT uint32_t pt2rt_c_api_version(void);
PT2RT_C_EXPORT pt2rt_status pt2rt_check_c_api_version(uint32_t header_version);
/* "float32", "bfloat16", ... (the package spec's names) and the size of one element; NULL / 0 for other values. */
PT2RT_C_EXPORT const char* pt2rt_dtype_name(pt2rt_dtype dtype);
PT2RT_C_EXPORT size_t pt2rt_dtype_size(pt2rt_dtype dtype);

/* Load options (version 2), the C++ API's pt2rt::Options: create, set, pass to any number of loads, free. A setter
 * given a value out of range returns PT2RT_ERROR_USAGE and leaves the options as they were. */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_create(pt2rt_options** out);
PT2RT_C_EXPORT void pt2rt_options_free(pt2rt_options* options);
/* The CPU variant to load ("avx512", "avx2", ...; NULL or "": the best this CPU runs). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_cpu_isa(pt2rt_options* options, const char* isa);
/* Model instances for concurrent calls, 1..1024 (default 1). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_num_runners(pt2rt_options* options, int num_runners);
/* An ops library to load first (call once per library, in order). None added: the ones the spec names. */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_add_ops_library(pt2rt_options* options, const char* path);
/* Also look for the spec's ops libraries next to the package (default 0: off). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_ops_from_package_dir(pt2rt_options* options, int enabled);
/* Refuse a package made by a newer torch minor version than the runtime's, or before 2.11 (default 1); check its
   library's SHA-256 (default 1). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_check_torch_version(pt2rt_options* options, int enabled);
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_check_sha256(pt2rt_options* options, int enabled);
/* Keep the package file open (from memory: its golden cases) for the runtime's life (default 1). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_keep_package_open(pt2rt_options* options, int enabled);
/* (Version 3) Runs reuse the CPU memory earlier runs freed: once warm, pt2rt_run_into of a model whose shapes do
   not change allocates nothing (default 0: off; pt2rt::Options::reuse_run_memory says what it costs). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_reuse_run_memory(pt2rt_options* options, int enabled);
/* (Version 4) Intra-op threads of this runtime's runs, 1..1024: each pt2rt_run sizes its calling thread's OpenMP
   team to this for the run, then gives the thread its own setting back (default 0: pt2rt_set_num_threads' count,
   else one per core). A process running several models at once divides its cores among them. */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_intra_op_threads(pt2rt_options* options, int threads);
/* CUDA packages: the device to run on (-1, the default: the current device). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_device_index(pt2rt_options* options, int device_index);
/* Bounds on what a package may make a load read: one record, the spec record, all files extracted (bytes, > 0). */
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_max_record_bytes(pt2rt_options* options, uint64_t bytes);
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_max_metadata_bytes(pt2rt_options* options, uint64_t bytes);
PT2RT_C_EXPORT pt2rt_status pt2rt_options_set_max_extracted_bytes(pt2rt_options* options, uint64_t bytes);

/* Loads a package: reads its spec, loads and checks the ops libraries, checks the package against this host, loads
 * the model, as the options say (NULL: the defaults). On success *out is the caller's; free it once with
 * pt2rt_runtime_free. */
PT2RT_C_EXPORT pt2rt_status pt2rt_load_with_options(const char* package_path, const pt2rt_options* options,
                                                    pt2rt_runtime** out);
PT2RT_C_EXPORT void pt2rt_runtime_free(pt2rt_runtime* runtime);
/* Version 1's load, kept for programs built against it: pt2rt_load_with_options with ops_libraries added in order
 * and num_runners set (0: 1). */
PT2RT_C_EXPORT pt2rt_status pt2rt_load(const char* package_path, const char* const* ops_libraries,
                                       size_t n_ops_libraries, int num_runners, pt2rt_runtime** out);
/* A package held in memory (an asset, a download): validated as a file is. The bytes are read during the call only
 * and may be freed once it returns; the model's files go to a private directory (0700, under $TMPDIR) that
 * pt2rt_runtime_free removes. */
PT2RT_C_EXPORT pt2rt_status pt2rt_load_from_memory(const void* bytes, size_t size, const pt2rt_options* options,
                                                   pt2rt_runtime** out);

/* Validates the inputs against the spec and runs the model. On success outputs[0 .. *n_outputs) are the caller's.
 * When outputs_capacity is smaller than pt2rt_num_outputs(), nothing runs, *n_outputs is set to the number
 * needed and the status is PT2RT_ERROR_USAGE. */
PT2RT_C_EXPORT pt2rt_status pt2rt_run(const pt2rt_runtime* runtime, const pt2rt_tensor_view* inputs, size_t n_inputs,
                                      pt2rt_tensor** outputs, size_t outputs_capacity, size_t* n_outputs);

/* Host memory of the caller that pt2rt_run_into writes an output into: dense, row-major, the output's shape and
 * dtype (from pt2rt_output_spec for static shapes, else from an earlier run). */
typedef struct {
  void* data;
  const int64_t* shape;
  size_t ndim;
  pt2rt_dtype dtype;
} pt2rt_output_view;

/* Runs the model and writes output i into outputs[i] (n_outputs must be pt2rt_num_outputs()). PT2RT_ERROR_USAGE,
 * with nothing written, when a view's dtype, rank, shape or buffer does not fit the output, or a buffer overlaps
 * an input or another output. Thread-safe like pt2rt_run; allocates nothing for the caller to free. */
PT2RT_C_EXPORT pt2rt_status pt2rt_run_into(const pt2rt_runtime* runtime, const pt2rt_tensor_view* inputs,
                                           size_t n_inputs, const pt2rt_output_view* outputs, size_t n_outputs);

/* What the package expects and returns: name, dtype, and shape with -1 for dynamic dims (the pointers belong to
 * the runtime). PT2RT_ERROR_USAGE for an index out of range; any out-pointer may be NULL. */
PT2RT_C_EXPORT size_t pt2rt_num_inputs(const pt2rt_runtime* runtime);
PT2RT_C_EXPORT size_t pt2rt_num_outputs(const pt2rt_runtime* runtime);
PT2RT_C_EXPORT pt2rt_status pt2rt_input_spec(const pt2rt_runtime* runtime, size_t index, const char** name,
                                             pt2rt_dtype* dtype, const int64_t** shape, size_t* ndim);
PT2RT_C_EXPORT pt2rt_status pt2rt_output_spec(const pt2rt_runtime* runtime, size_t index, const char** name,
                                              pt2rt_dtype* dtype, const int64_t** shape, size_t* ndim);
/* For dynamic dims: the smallest and largest size input `index`'s dim `dim` takes (-1 for no largest); a static
 * dim gives its size twice. */
PT2RT_C_EXPORT pt2rt_status pt2rt_input_dim_range(const pt2rt_runtime* runtime, size_t index, size_t dim,
                                                  int64_t* min, int64_t* max);

/* An output's host memory, shape and dtype (valid until pt2rt_tensor_free). */
PT2RT_C_EXPORT const void* pt2rt_tensor_data(const pt2rt_tensor* tensor);
PT2RT_C_EXPORT size_t pt2rt_tensor_ndim(const pt2rt_tensor* tensor);
PT2RT_C_EXPORT const int64_t* pt2rt_tensor_shape(const pt2rt_tensor* tensor);
PT2RT_C_EXPORT pt2rt_dtype pt2rt_tensor_dtype(const pt2rt_tensor* tensor);
PT2RT_C_EXPORT size_t pt2rt_tensor_nbytes(const pt2rt_tensor* tensor);
PT2RT_C_EXPORT void pt2rt_tensor_free(pt2rt_tensor* tensor);

/* Threads each run may use inside torch's kernels, process-wide, 1..1024 (other values: PT2RT_ERROR_USAGE); a runtime
   loaded with pt2rt_options_set_intra_op_threads keeps its own. */
PT2RT_C_EXPORT pt2rt_status pt2rt_set_num_threads(int threads);

#ifdef __cplusplus
}
#endif

#endif /* PT2RT_PT2RT_C_H */
