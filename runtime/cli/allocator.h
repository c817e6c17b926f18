// The malloc of pt2run and pt2serve (allocator.cpp): jemalloc where the build has it, linked into the executable.
#pragma once

#include <cstddef>
#include <string>

namespace pt2rt::cli {

// "jemalloc <version>" when the process's malloc is jemalloc's, "glibc <version>" otherwise
std::string allocator_name();
// bytes the process's callers hold allocated (jemalloc's stats.allocated: live blocks, not what it keeps mapped),
// 0 where the malloc cannot say
std::size_t allocated_bytes();
// hands the free pages of every arena back to the system now (jemalloc: arena.<all>.purge; glibc: malloc_trim)
void release_free_memory();

}  // namespace pt2rt::cli
