/* Versions 2 to 4 of the C API from C99 (-std=c99 -pedantic -Werror, pthreads), as a game engine would use it:
 * the package read into memory and its file deleted, loaded from the buffer with options (a CPU variant, two
 * runners, the ops library, run memory reused, one intra-op thread per run), the buffer freed, then 4 threads
 * running frames into buffers of their own (pt2rt_run_into). Built against version 2's header too
 * (tests/c_api/v2): no reuse or threads there.
 * Prints the checksum of 60 frames (the calling script compares it with the eager model's), checks the errors of
 * the new calls and that nothing is left under $TMPDIR once the runtime is freed.
 *   test_c_api_v2 PACKAGE_COPY OPS_LIBRARY CPU_ISA   (PACKAGE_COPY: a copy of net_dynamic.pt2, deleted here) */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pt2rt/pt2rt_c.h>

#include "checks.h"

enum { C = 3, H = 32, W = 32, FRAME = C * H * W, FRAMES = 60, THREADS = 4 };

static void frame(float* x, int f) {
  int i;
  for (i = 0; i < FRAME; ++i) x[i] = (float)sin(0.001 * (double)(i + f));
}

static const pt2rt_runtime* g_rt;
static size_t g_out_numel;
static int64_t g_out_shape[8];
static size_t g_out_ndim;
static double g_sums[FRAMES];

/* Frames t, t + THREADS, ...: each into the thread's own input and output buffers, reused every frame. */
static void* worker(void* arg) {
  const int t = (int)(intptr_t)arg;
  static const int64_t in_shape[4] = {1, C, H, W};
  float* x = (float*)malloc(FRAME * sizeof(float));
  float* y = (float*)malloc(g_out_numel * sizeof(float));
  pt2rt_tensor_view in;
  pt2rt_output_view out;
  int f;
  size_t i;
  if (x == NULL || y == NULL) {
    free(x);
    free(y);
    return (void*)1;
  }
  in.data = x;
  in.shape = in_shape;
  in.ndim = 4;
  in.dtype = PT2RT_FLOAT32;
  out.data = y;
  out.shape = g_out_shape;
  out.ndim = g_out_ndim;
  out.dtype = PT2RT_FLOAT32;
  for (f = t; f < FRAMES; f += THREADS) {
    double sum = 0;
    frame(x, f);
    if (pt2rt_run_into(g_rt, &in, 1, &out, 1) != PT2RT_OK) {
      fprintf(stderr, "thread %d frame %d: %s\n", t, f, pt2rt_last_error());
      free(x);
      free(y);
      return (void*)1;
    }
    for (i = 0; i < g_out_numel; ++i) sum += y[i];
    g_sums[f] = sum;
  }
  free(x);
  free(y);
  return NULL;
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* bytes;
  long n;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  bytes = (char*)malloc((size_t)n);
  if (bytes != NULL && fread(bytes, 1, (size_t)n, f) != (size_t)n) {
    free(bytes);
    bytes = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return bytes;
}

/* Entries of $TMPDIR other than . and .. */
static int tmpdir_entries(void) {
  const char* dir = getenv("TMPDIR");
  DIR* d;
  struct dirent* e;
  int n = 0;
  if (dir == NULL || (d = opendir(dir)) == NULL) return -1;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      fprintf(stderr, "left under TMPDIR: %s\n", e->d_name);
      ++n;
    }
  }
  closedir(d);
  return n;
}

static void test_options_errors(void) {
  pt2rt_options* o = NULL;
  pt2rt_runtime* rt = (pt2rt_runtime*)&o; /* must be set to NULL on failure */
  static const char junk[64] = "not a package";
  CHECK_STATUS(pt2rt_options_create(NULL), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_num_runners(NULL, 2), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "options is NULL"));
  CHECK_STATUS(pt2rt_options_create(&o), PT2RT_OK);
  CHECK_STATUS(pt2rt_options_set_num_runners(o, 0), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "expected 1..1024"));
  CHECK_STATUS(pt2rt_options_set_num_runners(o, 1025), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_add_ops_library(o, NULL), PT2RT_ERROR_USAGE);
#if PT2RT_C_API_VERSION >= 3
  CHECK_STATUS(pt2rt_options_set_reuse_run_memory(NULL, 1), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_reuse_run_memory(o, -1), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "pt2rt_options_set_reuse_run_memory"));
#endif
#if PT2RT_C_API_VERSION >= 4
  CHECK_STATUS(pt2rt_options_set_intra_op_threads(NULL, 1), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_intra_op_threads(o, -1), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "threads is -1, expected 1..1024"));
  CHECK_STATUS(pt2rt_options_set_intra_op_threads(o, 1025), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_intra_op_threads(o, 0), PT2RT_OK);
#endif
  CHECK_STATUS(pt2rt_options_set_keep_package_open(o, 2), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "expected 0 or 1"));
  CHECK_STATUS(pt2rt_options_set_device_index(o, -2), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_max_record_bytes(o, 0), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_options_set_check_sha256(o, 1), PT2RT_OK);
  CHECK_STATUS(pt2rt_load_from_memory(NULL, 10, o, &rt), PT2RT_ERROR_USAGE);
  CHECK(rt == NULL);
  CHECK_STATUS(pt2rt_load_from_memory(junk, sizeof junk, o, NULL), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_load_from_memory(junk, sizeof junk, o, &rt), PT2RT_ERROR_PACKAGE);
  CHECK(contains(pt2rt_last_error(), "the package in memory (64 bytes) is not a .pt2 package"));
  CHECK_STATUS(pt2rt_load_with_options(NULL, o, &rt), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_load_with_options("/nonexistent/model.pt2", NULL, &rt), PT2RT_ERROR_PACKAGE);
  pt2rt_options_free(o);
  pt2rt_options_free(NULL);
}

int main(int argc, char** argv) {
  pt2rt_options* options = NULL;
  pt2rt_runtime* rt = NULL;
  void* bytes;
  size_t size = 0, i;
  const int64_t* spec_shape = NULL;
  pthread_t threads[THREADS];
  double checksum = 0;
  int t;

  if (argc != 4) {
    fprintf(stderr, "usage: %s PACKAGE_COPY OPS_LIBRARY CPU_ISA\n", argv[0]);
    return 2;
  }
  CHECK_STATUS(pt2rt_check_c_api_version(PT2RT_C_API_VERSION), PT2RT_OK);
  CHECK_STATUS(pt2rt_check_c_api_version(1), PT2RT_OK); /* programs built against version 1 still load */
  CHECK(pt2rt_c_api_version() >= 2);
  test_options_errors();

  bytes = read_file(argv[1], &size);
  if (bytes == NULL) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  CHECK(unlink(argv[1]) == 0); /* no package file from here on */

  CHECK_STATUS(pt2rt_options_create(&options), PT2RT_OK);
  CHECK_STATUS(pt2rt_options_set_cpu_isa(options, "no_such_isa"), PT2RT_OK);
  CHECK_STATUS(pt2rt_load_from_memory(bytes, size, options, &rt), PT2RT_ERROR_PACKAGE);
  CHECK(contains(pt2rt_last_error(), "no_such_isa"));
  CHECK_STATUS(pt2rt_options_set_cpu_isa(options, argv[3]), PT2RT_OK);
  CHECK_STATUS(pt2rt_options_set_num_runners(options, 2), PT2RT_OK);
  CHECK_STATUS(pt2rt_options_add_ops_library(options, argv[2]), PT2RT_OK);
#if PT2RT_C_API_VERSION >= 3
  CHECK_STATUS(pt2rt_options_set_reuse_run_memory(options, 1), PT2RT_OK);
#endif
#if PT2RT_C_API_VERSION >= 4
  CHECK_STATUS(pt2rt_options_set_intra_op_threads(options, 1), PT2RT_OK);
#endif
  CHECK_STATUS(pt2rt_load_from_memory(bytes, size, options, &rt), PT2RT_OK);
  memset(bytes, 0, size);
  free(bytes);
  pt2rt_options_free(options);
  if (rt == NULL) return 1;

  /* the output's shape at batch 1, from its spec */
  CHECK_STATUS(pt2rt_output_spec(rt, 0, NULL, NULL, &spec_shape, &g_out_ndim), PT2RT_OK);
  if (spec_shape == NULL || g_out_ndim == 0 || g_out_ndim > 8) return 1;
  g_out_numel = 1;
  for (i = 0; i < g_out_ndim; ++i) {
    g_out_shape[i] = spec_shape[i] == -1 ? 1 : spec_shape[i];
    g_out_numel *= (size_t)g_out_shape[i];
  }

  /* views that do not fit: refused, nothing written */
  {
    static float x[FRAME];
    float* y = (float*)calloc(g_out_numel, sizeof(float));
    const int64_t in_shape[4] = {1, C, H, W};
    int64_t wrong[8];
    pt2rt_tensor_view in;
    pt2rt_output_view out;
    in.data = x;
    in.shape = in_shape;
    in.ndim = 4;
    in.dtype = PT2RT_FLOAT32;
    out.data = y;
    out.shape = g_out_shape;
    out.ndim = g_out_ndim;
    out.dtype = PT2RT_FLOAT64;
    CHECK_STATUS(pt2rt_run_into(rt, &in, 1, &out, 1), PT2RT_ERROR_USAGE);
    CHECK(contains(pt2rt_last_error(), "expected dtype float32, got float64"));
    out.dtype = PT2RT_FLOAT32;
    CHECK_STATUS(pt2rt_run_into(rt, &in, 1, &out, 0), PT2RT_ERROR_USAGE);
    CHECK(contains(pt2rt_last_error(), "expected 1 output view, got 0"));
    memcpy(wrong, g_out_shape, g_out_ndim * sizeof(int64_t));
    wrong[0] = 2; /* batch 2 for a batch-1 input: known only after the run */
    out.shape = wrong;
    CHECK_STATUS(pt2rt_run_into(rt, &in, 1, &out, 1), PT2RT_ERROR_USAGE);
    CHECK(contains(pt2rt_last_error(), "nothing was written"));
    out.shape = NULL;
    CHECK_STATUS(pt2rt_run_into(rt, &in, 1, &out, 1), PT2RT_ERROR_USAGE);
    CHECK_STATUS(pt2rt_run_into(NULL, &in, 1, &out, 1), PT2RT_ERROR_USAGE);
    for (i = 0; i < g_out_numel; ++i) CHECK(y[i] == 0.0f);
    free(y);
  }

  g_rt = rt;
  for (t = 0; t < THREADS; ++t) CHECK(pthread_create(&threads[t], NULL, worker, (void*)(intptr_t)t) == 0);
  for (t = 0; t < THREADS; ++t) {
    void* result = NULL;
    pthread_join(threads[t], &result);
    CHECK(result == NULL);
  }
  for (t = 0; t < FRAMES; ++t) checksum += g_sums[t];
  pt2rt_runtime_free(rt);
  CHECK(tmpdir_entries() == 0);

  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all C API version %d checks passed\n", PT2RT_C_API_VERSION);
  printf("checksum %.17g\n", checksum);
  return 0;
}
