# pt2rt_add_ops_library(NAME SOURCES file... )
#
# An ops library: lib<NAME>.so, registering custom ops and classes (TORCH_LIBRARY) that Python loads with
# torch.ops.load_library and the runtime with dlopen - the same file. It is C++20, links libtorch only (never
# libpython), must resolve every symbol at link time, finds what sits next to it ($ORIGIN), and builds its .cu
# sources only when the torch found has CUDA (without them its CUDA kernels are simply not registered). Link more
# with target_link_libraries(NAME PRIVATE ...). Needs find_package(Torch) first (done here when it was not).
# pt2rt/lite_op.h: this file's source tree (cmake/) or an installed package (lib/cmake/pt2rt)
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../runtime/include/pt2rt/lite_op.h")
  get_filename_component(PT2RT_LITE_OP_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../runtime/include" ABSOLUTE)
elseif(DEFINED PACKAGE_PREFIX_DIR AND EXISTS "${PACKAGE_PREFIX_DIR}/include/pt2rt/lite_op.h")
  set(PT2RT_LITE_OP_INCLUDE_DIR "${PACKAGE_PREFIX_DIR}/include")  # the installed package's prefix (pt2rtConfig)
else()
  get_filename_component(PT2RT_LITE_OP_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
endif()

function(pt2rt_add_ops_library name)
  cmake_parse_arguments(arg "" "" "SOURCES" ${ARGN})
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "pt2rt_add_ops_library(${name}): give its sources: SOURCES file...")
  endif()
  if(NOT TARGET torch)
    find_package(Torch REQUIRED)
  endif()
  set(sources)
  foreach(src IN LISTS arg_SOURCES)
    if(src MATCHES "\\.cu$")
      if(TARGET torch_cuda)
        list(APPEND sources ${src})
        set_source_files_properties(${src} PROPERTIES LANGUAGE CUDA)
      else()
        message(STATUS "${name}: ${src} not built (the torch found has no CUDA)")
      endif()
    else()
      list(APPEND sources ${src})
    endif()
  endforeach()
  add_library(${name} SHARED ${sources})
  target_compile_features(${name} PRIVATE cxx_std_20)  # torch's headers want it
  set_target_properties(${name} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON
                        CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden  # registration needs no exports
                        BUILD_RPATH_USE_ORIGIN ON INSTALL_RPATH "$ORIGIN")
  target_link_libraries(${name} PRIVATE torch)
  target_link_options(${name} PRIVATE -Wl,--no-undefined)
endfunction()

# pt2rt_add_lite_ops_library(NAME SOURCES file... )
#
# An ops library's lite build: lib<NAME>.so (name it <full library's name>_lite) holding the ops' lite entries
# (PT2RT_LITE_OP, <pt2rt/lite_op.h>) on the same kernels as the full library. No torch: it calls the lite runtime's
# pt2rt_lite_* functions, which the runtime loading it provides (so they stay undefined here). Only the entries are
# exported.
function(pt2rt_add_lite_ops_library name)
  cmake_parse_arguments(arg "" "" "SOURCES" ${ARGN})
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "pt2rt_add_lite_ops_library(${name}): give its sources: SOURCES file...")
  endif()
  add_library(${name} SHARED ${arg_SOURCES})
  target_include_directories(${name} PRIVATE ${PT2RT_LITE_OP_INCLUDE_DIR})
  target_compile_features(${name} PRIVATE cxx_std_17)
  set_target_properties(${name} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        BUILD_RPATH_USE_ORIGIN ON INSTALL_RPATH "$ORIGIN")
endfunction()
