"""`export-tools new-op NAMESPACE::OP --out DIR`: a buildable ops project to start a user's own operator from.

DIR/CMakeLists.txt         builds lib<ns>_ops.so with pt2rt_add_ops_library (find_package(pt2rt) from a dist/) and
                           its lite build lib<ns>_ops_lite.so with pt2rt_add_lite_ops_library (no torch)
DIR/csrc/<op>_kernel.h     the CPU kernel (2 * x) to edit, torch-free: both libraries call it
DIR/csrc/<op>.cpp          the schema NAMESPACE::OP(Tensor x) -> Tensor and the CPU kernel's registration
DIR/csrc/<op>_lite.cpp     the op's lite entry (PT2RT_LITE_OP): what a package exported with --lite calls
DIR/csrc/<op>_cuda.cu      its CUDA kernel (built when the torch found has CUDA)
DIR/python/<ns>_ops/       `import <ns>_ops` loads DIR/build/lib<ns>_ops.so (or $<NS>_OPS_LIBRARY), registers the fake
DIR/tests/test_<op>.py     the kernel against a reference, torch.library.opcheck, torch.compile
DIR/README.md              how to build, test, export and run it
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ScaffoldError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# namespaces torch and the runtime own
_RESERVED = {"aten", "prim", "prims", "quantized", "_quantized", "cuda", "higher_order", "inductor", "torch", "c10"}


def parse_name(qualified: str) -> tuple[str, str]:
    ns, sep, op = qualified.partition("::")
    if not sep or not _NAME.match(ns) or not _NAME.match(op):
        raise ScaffoldError(f"expected NAMESPACE::OP in lower case (letters, digits, _; e.g. acme::scale2), "
                            f"got {qualified!r}")
    if ns in _RESERVED:
        raise ScaffoldError(f"namespace {ns!r} is torch's own; choose your own")
    return ns, op


def write_project(qualified: str, out: Path) -> list[Path]:
    """Write the project into `out` (which must not exist or be empty); returns the files written."""
    ns, op = parse_name(qualified)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ScaffoldError(f"{out} exists and is not an empty directory; choose a new one")
    files = {
        "CMakeLists.txt": _CMAKE,
        f"csrc/{op}_kernel.h": _KERNEL,
        f"csrc/{op}.cpp": _CPU,
        f"csrc/{op}_lite.cpp": _LITE,
        f"csrc/{op}_cuda.cu": _CUDA,
        f"python/{ns}_ops/__init__.py": _PYTHON,
        f"tests/test_{op}.py": _TEST,
        "README.md": _README,
    }
    written = []
    for rel, template in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = (template.replace("@NS@", ns).replace("@OP@", op).replace("@NS_UPPER@", ns.upper())
                .replace("@QUALIFIED@", f"{ns}::{op}"))
        path.write_text(text.lstrip("\n"))
        written.append(path)
    return written


_CMAKE = """
# lib@NS@_ops.so: the @NS@ ops, loadable by Python (import @NS@_ops) and by the pt2rt runtime alike.
#   cmake -S . -B build -DCMAKE_PREFIX_PATH="<pt2rt dist>;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
#   cmake --build build
#   cmake --install build --prefix <pt2rt dist>   # lib/lib@NS@_ops.so next to libpt2rt.so, RUNPATH $ORIGIN
cmake_minimum_required(VERSION 3.25)
project(@NS@_ops LANGUAGES CXX)
find_package(Torch REQUIRED)
if(TARGET torch_cuda)
  enable_language(CUDA)  # the .cu kernels; with a CPU-only torch they are left out
endif()
find_package(pt2rt REQUIRED)  # pt2rt_add_ops_library
pt2rt_add_ops_library(@NS@_ops SOURCES csrc/@OP@.cpp csrc/@OP@_cuda.cu)
# the lite build, for packages exported with --lite (pt2rt-lite): the same kernel, no torch; the exporter finds it
# beside lib@NS@_ops.so
pt2rt_add_lite_ops_library(@NS@_ops_lite SOURCES csrc/@OP@_lite.cpp)
set_target_properties(@NS@_ops @NS@_ops_lite PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
include(GNUInstallDirs)
install(TARGETS @NS@_ops @NS@_ops_lite LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
"""

_KERNEL = """
// @QUALIFIED@'s CPU kernel, torch-free: the full library (@OP@.cpp) and the lite build (@OP@_lite.cpp) both run
// it. It computes 2 * x: edit the loop, and the reference in tests/test_@OP@.py with it.
#pragma once

#include <cstdint>

namespace @NS@_kernels {

// dst[i] = f(src[i]) for i in [begin, end) of dense rows; T: float, double, or a type converting to and from float
template <typename T>
void @OP@(const T* src, T* dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<T>(2.0f * static_cast<float>(src[i]));
}

}  // namespace @NS@_kernels
"""

_CPU = """
// @QUALIFIED@(Tensor x) -> Tensor: the schema (one TORCH_LIBRARY block per namespace, in one library) and the
// CPU kernel's registration; the kernel is @OP@_kernel.h's.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "@OP@_kernel.h"

namespace {

at::Tensor @OP@_cpu(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "@QUALIFIED@: expected a floating-point tensor, got ", x.scalar_type());
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());  // contiguous, as the fake says
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "@OP@_cpu", [&] {
    const scalar_t* src = in.const_data_ptr<scalar_t>();
    scalar_t* dst = out.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, in.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      @NS@_kernels::@OP@(src, dst, begin, end);
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(@NS@, m) { m.def("@OP@(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(@NS@, CPU, m) { m.impl("@OP@", &@OP@_cpu); }
"""

_LITE = """
// @QUALIFIED@'s lite entry (lib@NS@_ops_lite.so, no torch): what a package exported with --lite calls in place of
// the op (docs/lite.md). The arguments follow the schema (pt2rt/lite_op.h has the table); the kernel is
// @OP@_kernel.h's. float32 and float64 here; the full library takes half types too.
#include <pt2rt/lite_op.h>

#include <string>

#include "@OP@_kernel.h"

namespace lite = pt2rt::lite_op;

namespace {

template <typename T>
void run(const lite::Tensor& in, const lite::Tensor& out) {
  const T* src = static_cast<const T*>(in.ref().data());
  T* dst = static_cast<T*>(out.ref().data());
  lite::parallel_for(0, in.ref().numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    @NS@_kernels::@OP@(src, dst, begin, end);
  });
}

}  // namespace

// the schema this entry takes its arguments by: keep it the TORCH_LIBRARY's (export and pt2rt-lite compare them)
PT2RT_LITE_OP_SCHEMA(@NS@, @OP@, "@QUALIFIED@(Tensor x) -> Tensor");

PT2RT_LITE_OP(@NS@, @OP@)(AtenTensorHandle x, AtenTensorHandle* ret0) {
  return lite::guarded("@QUALIFIED@", [&] {
    const lite::TensorRef given(x);
    const lite::Dtype dtype = given.dtype();
    if (dtype != lite::Dtype::Float32 && dtype != lite::Dtype::Float64) {
      throw std::invalid_argument(std::string("expected a float32 or float64 tensor, got ") + lite::dtype_name(dtype));
    }
    const lite::Tensor in = lite::Tensor::contiguous(given);
    lite::Tensor out = lite::Tensor::empty_contiguous(given.sizes(), given.dim(), dtype);  // as the fake says
    if (dtype == lite::Dtype::Float32) {
      run<float>(in, out);
    } else {
      run<double>(in, out);
    }
    *ret0 = out.release();
  });
}
"""

_CUDA = """
// The CUDA kernel of @QUALIFIED@ (built when the torch found has CUDA): same result as the CPU kernel.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>  // not ATen/cuda/CUDAContext.h: it needs the cuSPARSE/cuBLAS headers too
#include <torch/library.h>

#include <algorithm>

namespace {

template <typename T>
__global__ void @OP@_kernel(const T* src, T* dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<T>(2.0f * static_cast<float>(src[i]));
  }
}

at::Tensor @OP@_cuda(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "@QUALIFIED@: expected a floating-point tensor, got ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  const int64_t n = in.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "@OP@_cuda", [&] {
    @OP@_kernel<scalar_t><<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream(x.device().index())>>>(
        in.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(@NS@, CUDA, m) { m.impl("@OP@", &@OP@_cuda); }
"""

_PYTHON = '''
"""@NS@_ops: `import @NS@_ops` loads lib@NS@_ops.so and registers the fake of @QUALIFIED@ (tracing, torch.compile,
torch.export need it). The library: $@NS_UPPER@_OPS_LIBRARY, else the project's build/lib@NS@_ops.so."""

from __future__ import annotations

import os
from pathlib import Path

import torch

ENV_VAR = "@NS_UPPER@_OPS_LIBRARY"
LIBRARY_NAME = "lib@NS@_ops.so"


def library_path() -> Path:
    env = os.environ.get(ENV_VAR)
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "build" / LIBRARY_NAME
    if not path.is_file():
        raise RuntimeError(f"{path} not found: build the project (cmake --build build), or set {ENV_VAR}")
    return path.resolve()


torch.ops.load_library(str(library_path()))


@torch.library.register_fake("@QUALIFIED@")
def _(x):
    torch._check(x.is_floating_point(), lambda: f"@QUALIFIED@: expected a floating-point tensor, got {x.dtype}")
    return x.new_empty(x.shape)  # contiguous, as the kernels return
'''

_TEST = '''
"""@QUALIFIED@ against its reference, on every device this machine has; opcheck for the fake and the schema;
torch.compile through the fake."""

import pytest
import torch

import @NS@_ops  # noqa: F401

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference(x):
    return 2 * x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_matches_the_reference(device, dtype):
    x = torch.randn(3, 4, 5, device=device).to(dtype)
    for xi in (x, x.transpose(0, 2)):  # any layout
        torch.testing.assert_close(torch.ops.@NS@.@OP@(xi), reference(xi))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    torch.library.opcheck(torch.ops.@NS@.@OP@.default, (torch.randn(4, 3, device=device),))


def test_torch_compile_traces_it_through_the_fake():
    f = torch.compile(lambda x: torch.ops.@NS@.@OP@(x) + 1, fullgraph=True, dynamic=True)
    for n in (3, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), reference(x) + 1)


def test_integer_input_is_refused():
    with pytest.raises(RuntimeError, match="expected a floating-point tensor"):
        torch.ops.@NS@.@OP@(torch.ones(3, dtype=torch.int64))
'''

_README = """
# @NS@_ops

`@QUALIFIED@(Tensor x) -> Tensor`, written by `export-tools new-op`. Edit `csrc/@OP@.cpp` (the schema and the CPU
kernel), `csrc/@OP@_cuda.cu` and the reference in `tests/test_@OP@.py` together.

    cmake -S . -B build -DCMAKE_PREFIX_PATH="<pt2rt dist>;$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    cmake --build build
    PYTHONPATH=python python -m pytest tests

Use it from PyTorch with `import @NS@_ops`, export a model that calls `torch.ops.@NS@.@OP@` with
`export-tools export` (it records `lib@NS@_ops.so` in the package), and run the package with
`pt2run run PACKAGE --ops build/lib@NS@_ops.so ...`, or install the library next to libpt2rt.so, where the runtime
finds it without `--ops` (its RUNPATH is `$ORIGIN`: it finds libtorch there too):

    cmake --install build --prefix <pt2rt dist>

pt2rt-lite (no libtorch): `csrc/@OP@_lite.cpp` is the op's lite entry, on the same kernel (`csrc/@OP@_kernel.h`),
built into `build/lib@NS@_ops_lite.so`. Export with `--lite` (export finds the lite build beside
`lib@NS@_ops.so` and refuses a model whose op has none), then run the package with pt2rt-lite's pt2run:
`pt2run run PACKAGE --ops build/lib@NS@_ops_lite.so ...`, or install it beside the lite `libpt2rt.so`.
"""
