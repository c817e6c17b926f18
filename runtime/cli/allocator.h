// The malloc of pt2run and pt2serve (allocator.cpp): jemalloc where the build has it, linked into the executable.
#pragma once

#include <cstddef>
#include <string>

namespace pt2rt::cli {

// "jemalloc <version>" when the process's malloc is jemalloc's, "glibc <version>" otherwise
std::string allocator_name();
// bytes the process's malloc holds for its callers (jemalloc's stats.allocated), 0 where it cannot say
std::size_t allocated_bytes();

}  // namespace pt2rt::cli
