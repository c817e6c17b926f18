/* The C API from C99 (-std=c99 -pedantic -Werror): errors, introspection, exact results on the op-only package,
 * batch consistency and several inputs/outputs, then a checksum of 60 frames through the example model that the
 * calling script compares with the eager model's.
 *   test_c_api PACKAGES_DIR OPS_LIBRARY   (PACKAGES_DIR: tests/cpp/export_packages.py's output) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pt2rt/pt2rt_c.h>

#include "checks.h"

static char path_buf[4096];
static const char* in_dir(const char* dir, const char* name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static void test_versions_and_names(void) {
  /* this program may be built against an older header than the library's (tests/c_api/v1) */
  CHECK_STATUS(pt2rt_check_c_api_version(PT2RT_C_API_VERSION), PT2RT_OK);
  CHECK(pt2rt_c_api_version() >= PT2RT_C_API_VERSION);
  CHECK_STATUS(pt2rt_check_c_api_version(pt2rt_c_api_version() + 1), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "built for C API version"));
  CHECK_STATUS(pt2rt_check_c_api_version(0), PT2RT_ERROR_USAGE);
  CHECK(strlen(pt2rt_version()) > 0);
  CHECK(strcmp(pt2rt_status_name(PT2RT_ERROR_INPUT), "input") == 0);
  CHECK(strcmp(pt2rt_status_name((pt2rt_status)42), "unknown") == 0);
  CHECK(strcmp(pt2rt_dtype_name(PT2RT_BFLOAT16), "bfloat16") == 0);
  CHECK(pt2rt_dtype_size(PT2RT_FLOAT64) == 8 && pt2rt_dtype_size(PT2RT_BOOL) == 1);
  CHECK(pt2rt_dtype_name((pt2rt_dtype)99) == NULL && pt2rt_dtype_size((pt2rt_dtype)-1) == 0);
  /* accessors of NULL objects, frees of NULL */
  CHECK(pt2rt_num_inputs(NULL) == 0 && pt2rt_tensor_data(NULL) == NULL && pt2rt_tensor_ndim(NULL) == 0);
  pt2rt_runtime_free(NULL);
  pt2rt_tensor_free(NULL);
  CHECK_STATUS(pt2rt_set_num_threads(0), PT2RT_ERROR_USAGE);
}

static void test_load_errors(const char* dir, const char* ops) {
  pt2rt_runtime* rt = (pt2rt_runtime*)&rt; /* must be reset to NULL on failure */
  CHECK_STATUS(pt2rt_load(NULL, NULL, 0, 0, &rt), PT2RT_ERROR_USAGE);
  CHECK(rt == NULL);
  CHECK(contains(pt2rt_last_error(), "package_path is NULL"));
  CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), NULL, 0, 0, NULL), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), NULL, 2, 0, &rt), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), &ops, 1, -3, &rt), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "num_runners is -3"));
  CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), &ops, 1, 2147483647, &rt), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "num_runners must be in 1..1024"));
  CHECK_STATUS(pt2rt_load(in_dir(dir, "no-such.pt2"), &ops, 1, 0, &rt), PT2RT_ERROR_PACKAGE);
  CHECK(contains(pt2rt_last_error(), "no-such.pt2"));
  CHECK_STATUS(pt2rt_load(in_dir(dir, "net_input.pt"), &ops, 1, 0, &rt), PT2RT_ERROR_PACKAGE);
  {
    const char* missing = "/nonexistent/libnothing.so";
    CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), &missing, 1, 0, &rt), PT2RT_ERROR_OPS_LIBRARY);
    CHECK(contains(pt2rt_last_error(), "libnothing.so"));
  }
  CHECK(rt == NULL);
}

/* The op-only package is the identity: its output is its input, bit for bit. */
static void test_op_only_package(const char* dir, const char* ops) {
  pt2rt_runtime* rt = NULL;
  const char* name = NULL;
  pt2rt_dtype dtype = PT2RT_BOOL;
  const int64_t* shape = NULL;
  size_t ndim = 0, n_out = 99, i;
  int64_t lo = 0, hi = 0;
  float* x;
  size_t numel = 1;
  pt2rt_tensor_view in;
  pt2rt_tensor* out[2] = {NULL, NULL};
  int64_t bad_shape[4];

  CHECK_STATUS(pt2rt_load(in_dir(dir, "op_static.pt2"), &ops, 1, 2, &rt), PT2RT_OK);
  if (rt == NULL) return;
  CHECK(pt2rt_num_inputs(rt) == 1 && pt2rt_num_outputs(rt) == 1);
  CHECK_STATUS(pt2rt_input_spec(rt, 0, &name, &dtype, &shape, &ndim), PT2RT_OK);
  CHECK(strcmp(name, "x") == 0 && dtype == PT2RT_FLOAT32 && ndim == 4);
  CHECK_STATUS(pt2rt_input_spec(rt, 1, &name, NULL, NULL, NULL), PT2RT_ERROR_USAGE);
  CHECK(contains(pt2rt_last_error(), "index 1 is out of range"));
  CHECK_STATUS(pt2rt_output_spec(rt, 0, NULL, &dtype, NULL, NULL), PT2RT_OK);
  CHECK_STATUS(pt2rt_input_dim_range(rt, 0, 1, &lo, &hi), PT2RT_OK);
  CHECK(lo == shape[1] && hi == shape[1]);
  CHECK_STATUS(pt2rt_input_dim_range(rt, 0, 4, &lo, &hi), PT2RT_ERROR_USAGE);

  for (i = 0; i < ndim; ++i) numel *= (size_t)shape[i];
  x = (float*)malloc(numel * sizeof(float));
  for (i = 0; i < numel; ++i) x[i] = (float)i * 0.25f - 7.0f;
  in.data = x;
  in.shape = shape;
  in.ndim = ndim;
  in.dtype = PT2RT_FLOAT32;

  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 0, &n_out), PT2RT_ERROR_USAGE); /* no room for the output */
  CHECK(n_out == 1);
  CHECK_STATUS(pt2rt_run(NULL, &in, 1, out, 2, &n_out), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, NULL), PT2RT_ERROR_USAGE);
  CHECK_STATUS(pt2rt_run(rt, NULL, 1, out, 2, &n_out), PT2RT_ERROR_USAGE);

  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, &n_out), PT2RT_OK);
  CHECK(n_out == 1);
  if (n_out == 1 && out[0] != NULL) {
    CHECK(pt2rt_tensor_dtype(out[0]) == PT2RT_FLOAT32 && pt2rt_tensor_ndim(out[0]) == ndim);
    CHECK(memcmp(pt2rt_tensor_shape(out[0]), shape, ndim * sizeof(int64_t)) == 0);
    CHECK(pt2rt_tensor_nbytes(out[0]) == numel * sizeof(float));
    CHECK(memcmp(pt2rt_tensor_data(out[0]), x, numel * sizeof(float)) == 0);
    pt2rt_tensor_free(out[0]);
  }

  /* bad inputs: a wrong shape, a wrong dtype, too few inputs, a dtype that is no pt2rt_dtype */
  memcpy(bad_shape, shape, sizeof bad_shape);
  bad_shape[2] += 1;
  in.shape = bad_shape;
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, &n_out), PT2RT_ERROR_INPUT);
  CHECK(n_out == 0);
  CHECK(contains(pt2rt_last_error(), "x"));
  in.shape = shape;
  in.dtype = PT2RT_INT32;
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, &n_out), PT2RT_ERROR_INPUT);
  CHECK(contains(pt2rt_last_error(), "float32"));
  in.dtype = (pt2rt_dtype)42;
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, &n_out), PT2RT_ERROR_USAGE);
  in.dtype = PT2RT_FLOAT32;
  CHECK_STATUS(pt2rt_run(rt, &in, 0, out, 2, &n_out), PT2RT_ERROR_INPUT);
  in.shape = NULL;
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 2, &n_out), PT2RT_ERROR_USAGE);

  free(x);
  pt2rt_runtime_free(rt);
}

static void frame(float* x, size_t n, int f) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = (float)sin(0.001 * (double)(i + (size_t)f));
}

/* The example model, batch 1..32: rows of a batch equal the frames run alone; prints the checksum of 60 frames. */
static void test_example_model(const char* dir, const char* ops) {
  enum { C = 3, H = 32, W = 32, FRAME = C * H * W };
  pt2rt_runtime* rt = NULL;
  int64_t lo = 0, hi = 0;
  int64_t shape1[4] = {1, C, H, W}, shape2[4] = {2, C, H, W};
  static float batch[2 * FRAME];
  pt2rt_tensor_view in;
  pt2rt_tensor* out[1] = {NULL};
  pt2rt_tensor* alone[2] = {NULL, NULL};
  size_t n_out = 0, i, out_numel;
  double checksum = 0, max_diff = 0;
  int f;

  CHECK_STATUS(pt2rt_load(in_dir(dir, "net_dynamic.pt2"), &ops, 1, 1, &rt), PT2RT_OK);
  if (rt == NULL) return;
  CHECK_STATUS(pt2rt_input_dim_range(rt, 0, 0, &lo, &hi), PT2RT_OK);
  CHECK(lo == 1 && hi == 32);
  in.dtype = PT2RT_FLOAT32;
  in.ndim = 4;

  frame(batch, FRAME, 0);
  frame(batch + FRAME, FRAME, 1);
  in.data = batch;
  in.shape = shape2;
  CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 1, &n_out), PT2RT_OK);
  in.shape = shape1;
  for (f = 0; f < 2; ++f) {
    in.data = batch + f * FRAME;
    CHECK_STATUS(pt2rt_run(rt, &in, 1, alone + f, 1, &n_out), PT2RT_OK);
  }
  if (out[0] && alone[0] && alone[1]) {
    const float* both = (const float*)pt2rt_tensor_data(out[0]);
    out_numel = pt2rt_tensor_nbytes(alone[0]) / sizeof(float);
    CHECK(pt2rt_tensor_shape(out[0])[0] == 2 && pt2rt_tensor_shape(alone[0])[0] == 1);
    for (f = 0; f < 2; ++f) {
      const float* one = (const float*)pt2rt_tensor_data(alone[f]);
      for (i = 0; i < out_numel; ++i) {
        double d = fabs((double)both[f * out_numel + i] - (double)one[i]);
        if (d > max_diff) max_diff = d;
      }
    }
    CHECK(max_diff <= 1e-4);
  }
  pt2rt_tensor_free(out[0]);
  pt2rt_tensor_free(alone[0]);
  pt2rt_tensor_free(alone[1]);

  /* batch 33 is past the package's range */
  {
    int64_t shape33[4] = {33, C, H, W};
    float* big = (float*)calloc(33 * FRAME, sizeof(float));
    in.data = big;
    in.shape = shape33;
    CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 1, &n_out), PT2RT_ERROR_INPUT);
    CHECK(contains(pt2rt_last_error(), "33"));
    free(big);
  }

  in.shape = shape1;
  for (f = 0; f < 60; ++f) {
    frame(batch, FRAME, f);
    in.data = batch;
    CHECK_STATUS(pt2rt_run(rt, &in, 1, out, 1, &n_out), PT2RT_OK);
    if (n_out == 1) {
      const float* y = (const float*)pt2rt_tensor_data(out[0]);
      for (i = 0; i < pt2rt_tensor_nbytes(out[0]) / sizeof(float); ++i) checksum += y[i];
      pt2rt_tensor_free(out[0]);
    }
  }
  pt2rt_runtime_free(rt);
  printf("checksum %.9g\n", checksum);
}

/* Two inputs, four outputs of three dtypes. */
static void test_multi_io(const char* dir, const char* ops) {
  pt2rt_runtime* rt = NULL;
  int64_t shape[4] = {2, 3, 4, 4};
  static float x[2 * 48], y[2 * 48];
  pt2rt_tensor_view in[2];
  pt2rt_tensor* out[4] = {NULL, NULL, NULL, NULL};
  size_t n_out = 0, i;
  const char* name = NULL;
  pt2rt_dtype dtype = PT2RT_FLOAT32;

  CHECK_STATUS(pt2rt_load(in_dir(dir, "multi_io.pt2"), &ops, 1, 0, &rt), PT2RT_OK);
  if (rt == NULL) return;
  CHECK(pt2rt_num_inputs(rt) == 2 && pt2rt_num_outputs(rt) == 4);
  CHECK_STATUS(pt2rt_input_spec(rt, 1, &name, NULL, NULL, NULL), PT2RT_OK);
  CHECK(strcmp(name, "y") == 0);
  CHECK_STATUS(pt2rt_output_spec(rt, 2, NULL, &dtype, NULL, NULL), PT2RT_OK);
  CHECK(dtype == PT2RT_INT64);
  CHECK_STATUS(pt2rt_output_spec(rt, 3, NULL, &dtype, NULL, NULL), PT2RT_OK);
  CHECK(dtype == PT2RT_BOOL);
  for (i = 0; i < 96; ++i) {
    x[i] = (float)i / 10.0f;
    y[i] = 1.0f - (float)i / 20.0f;
  }
  in[0].data = x;
  in[1].data = y;
  for (i = 0; i < 2; ++i) {
    in[i].shape = shape;
    in[i].ndim = 4;
    in[i].dtype = PT2RT_FLOAT32;
  }
  CHECK_STATUS(pt2rt_run(rt, in, 2, out, 3, &n_out), PT2RT_ERROR_USAGE);
  CHECK(n_out == 4);
  CHECK_STATUS(pt2rt_run(rt, in, 2, out, 4, &n_out), PT2RT_OK);
  CHECK(n_out == 4);
  if (n_out == 4) {
    CHECK(pt2rt_tensor_dtype(out[2]) == PT2RT_INT64 && pt2rt_tensor_ndim(out[2]) == 1);
    CHECK(pt2rt_tensor_shape(out[2])[0] == 2);
    CHECK(pt2rt_tensor_dtype(out[3]) == PT2RT_BOOL && pt2rt_tensor_nbytes(out[3]) == 96);
    for (i = 0; i < 4; ++i) pt2rt_tensor_free(out[i]);
  }
  pt2rt_runtime_free(rt);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PACKAGES_DIR OPS_LIBRARY\n", argv[0]);
    return 2;
  }
  test_versions_and_names();
  test_load_errors(argv[1], argv[2]);
  test_op_only_package(argv[1], argv[2]);
  test_example_model(argv[1], argv[2]);
  test_multi_io(argv[1], argv[2]);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
