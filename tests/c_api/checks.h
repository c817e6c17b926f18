/* The C tests' checks: a failed one prints where and what, counts in `failures`, and the test goes on. */
#ifndef PT2RT_TEST_CHECKS_H
#define PT2RT_TEST_CHECKS_H

#include <stdio.h>
#include <string.h>

#include <pt2rt/pt2rt_c.h>

static int failures = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

#define CHECK_STATUS(call, expected)                                                          \
  do {                                                                                        \
    pt2rt_status got_ = (call);                                                               \
    if (got_ != (expected)) {                                                                 \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #call, \
              pt2rt_status_name(got_), pt2rt_status_name(expected), pt2rt_last_error());      \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

static int contains(const char* haystack, const char* needle) { return strstr(haystack, needle) != NULL; }

#endif
