"""Mutation check of the tests that guard the most important behaviour (scripts/mutants.sh runs this with the
build's Python). Each mutant breaks one thing in the source; the build is redone and the tests that should notice
are run; a mutant they do not kill fails the run. The source is restored after each mutant (and on exit).

  mutants.py --build-dir DIR             every mutant; prints a table: mutant, killed or SURVIVED
  mutants.py --build-dir DIR NAME...     the mutants whose names contain one of NAME
  mutants.py --build-dir DIR --check     no build: each mutant's text occurs exactly once in its file, and each of
                                         its selectors selects at least one test (make test runs this: a mutant
                                         whose source moved or whose tests were renamed fails the tests)

A selector is one of
  ("ctest", REGEX)            ctest -R REGEX in the build
  ("gtest", BINARY, FILTER)   a gtest binary of the build (bin/) with --gtest_filter=FILTER: one case of an
                              entry that ctest runs whole (the bad-input matrix)
  ("pytest", ARG...)          pytest with these arguments (files, -k EXPR)
A mutant is killed when any of its selectors fails.
"""

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Mutant:
    name: str
    file: str
    old: str
    new: str
    selectors: list


MUTANTS: list[Mutant] = []


def mutant(name, file, old, new, *selectors):
    MUTANTS.append(Mutant(name, file, old, new, list(selectors)))


def ctest(regex):
    return ("ctest", regex)


def gtest(binary, gtest_filter):
    return ("gtest", binary, gtest_filter)


def pytest(*args):
    return ("pytest", *args)


def matrix(*cases):
    """Cases of the pt2run bad-input matrix (tests/cpp/test_pt2run_matrix.cpp), by name."""
    return gtest("test_runtime", ":".join(f"Matrix/BadInput.*/{c}" for c in cases))


# --- the runtime: golden comparison, inputs, ops libraries, packages, CPU variants, outputs
mutant("close_enough always true", "runtime/src/runtime.cpp",
       "  return at::allclose(a, e, tol.rtol, atol, /*equal_nan=*/true);", "  return true;",
       ctest("^Verify[.]"))
mutant("dynamic range not checked", "runtime/src/shapes.cpp",
       "      if (size < dd.min || (dd.max && size > *dd.max)) {", "      if (false) {",
       matrix("batch_above_range", "batch_zero"))
mutant("registration not checked", "runtime/src/ops_libraries.cpp",
       "  if (!missing.empty()) {", "  if (false) {",
       matrix("ops_lacks_the_ops"), ctest("^RuntimeErrors[.]"))
mutant("num_runners ignored (always 1)", "runtime/src/runtime.cpp",
       "static_cast<size_t>(options.num_runners),", "size_t{1},",
       ctest("^Runners[.]"))
mutant("integers compared through double", "runtime/src/runtime.cpp",
       "  if (!at::isFloatingType(expected.scalar_type())) return at::equal(actual.cpu(), expected.cpu());", "",
       ctest("^Verify[.]"))
mutant("spec integers accept floats", "runtime/src/parse_spec.cpp",
       "  if (!j.is_number_integer()) malformed", "  if (!j.is_number()) malformed",
       ctest("^fuzz_replay_spec"))
mutant("schemas not compared", "runtime/src/ops_libraries.cpp",
       "  if (!stale.empty()) {", "  if (false) {",
       matrix("ops_stale_build", "ops_stale_op_schema", "ops_stale_class_schema"))
mutant("outputs that alias handed out as they are", "runtime/src/runtime.cpp",
       "    if (not_own) t = t.clone(at::MemoryFormat::Contiguous);", "",
       ctest("OutputsAreOwned"))
mutant("input values: only the lower bound checked", "runtime/src/shapes.cpp",
       "    if (x < r.min || x > r.max)", "    if (x < r.min)",
       pytest("tests/python/test_zoo.py", "-k", "encoder"))
mutant("pt2serve: a request's inputs first checked in its batch", "serve/model.cpp",
       "    pt2rt::check_inputs(request_spec_, views);", "    (void)views;",
       pytest("tests/python/test_serve.py", "-k", "token_id"))
mutant("derived dim: any size accepted", "runtime/src/shapes.cpp",
       "        if ((size - dd.offset) % dd.scale != 0) {", "        if (false) {",
       pytest("tests/python/test_zoo.py", "-k", "derived_dims"))
mutant("golden atol_rel ignored (fixed atol)", "runtime/src/runtime.cpp",
       "  const double atol = tol.atol_rel && !fixed_atol ? *tol.atol_rel * scale : tol.atol;",
       "  const double atol = tol.atol;",
       pytest("tests/python/test_golden_rule.py"))
mutant("library SHA-256 not compared", "runtime/src/extract.cpp",
       "        if (digest != variant.sha256 || static_cast<int64_t>(bytes.size()) != variant.size) {",
       "        if (false) {",
       matrix("junk_model_library"), ctest("^RuntimeErrors[.]BadPackages$"))
mutant("variant: a missing CPU feature ignored", "runtime/src/cpu_features.cpp",
       "    } else if (!host_set().count(f)) {", "    } else if (false) {",
       ctest("^Variants[.]"))
mutant("variant: the first runnable, not the most specialised", "runtime/src/cpu_features.cpp",
       "    if (!best || v.cpu_features.size() > spec.variants[*best].cpu_features.size()) best = i;",
       "    if (!best) best = i;",
       ctest("^Variants[.]"))
mutant("C API: input errors reported as runtime errors", "runtime/src/errors.cpp",
       '    {ErrorCode::Input, 5, "input", "input"},',
       '    {ErrorCode::Input, 7, "input", "input"},',
       ctest("^CApi[.]"))
mutant("C API: a program built for version 1 refused", "runtime/src/c_api.cpp",
       "  if (header_version >= 1 && header_version <= PT2RT_C_API_VERSION) return PT2RT_OK;",
       "  if (header_version == PT2RT_C_API_VERSION) return PT2RT_OK;",
       ctest("c_api_consumers"))
mutant("tensor writer: one tensor as a tuple", "runtime/src/tensor.cpp",
       "  if (tensors.size() == 1) {", "  if (false) {",
       ctest("Pt2run[.](RunWrites|OutputFiles)"))
mutant("set_num_threads not applied on the calling thread", "runtime/src/runtime.cpp",
       "  detail::apply_num_threads();", "",
       ctest("NumThreadsHolds"))
mutant("run_into: a dynamic dim not checked after the run", "runtime/src/runtime.cpp",
       "    if (outs[i].sizes() != at::IntArrayRef(outputs[i].shape)) {", "    if (false) {",
       ctest("RunInto"))
mutant("run_into: a buffer overlapping an input accepted", "runtime/src/shapes.cpp",
       "      if (in.device == o.device && overlap(", "      if (false && overlap(",
       ctest("RunInto|CApi[.]Options"))
mutant("load_from_memory: golden cases not kept", "runtime/src/common.h",
       "  if (options.keep_package_open) impl->golden = impl->package->read(impl->spec.golden_record);", "",
       ctest("FromMemory"))

# --- the example ops
mutant("set_weight ignores its argument", "ops/identity_conv_class.cpp",
       "    weight_ = std::move(owned);", "    (void)owned;",
       pytest("ops/tests/test_identity_conv_class.py"))

# --- pt2serve
mutant("pt2serve: request size not bounded", "serve/protocol.cpp",
       "    if (d > 1 && span > limit / static_cast<size_t>(d)) {", "    if (false) {",
       ctest("^fuzz_replay_(infer|grpc)_request"))
mutant("pt2serve: every batched caller gets the first rows", "serve/model.cpp",
       "      start += p->rows;", "",
       pytest("tests/python/test_serve.py", "-k", "batched_and_each_gets_its_rows or classifier_batched"))
mutant("pt2serve: JSON depth not checked", "serve/protocol.cpp",
       "      if (++depth > max_depth) {", "      if (++depth > max_depth * 100000) {",
       ctest("^fuzz_replay_infer_request"))
mutant("pt2serve: decoded body not bounded", "serve/http_codec.cpp",
       "    if (produced > max_bytes - out.size()) {", "    if (false) {",
       pytest("tests/python/test_serve.py", "-k", "compressed_or_chunked"))
mutant("pt2serve: JSON data read into the first input", "serve/http_infer.cpp",
       "      const size_t k = stack_[1]->size() - 1;", "      const size_t k = 0;",
       ctest("^fuzz_replay_infer_request"))
mutant("pt2serve: header lines not bounded", "serve/http_server.cpp",
       "    evhttp_set_max_headers_size(http, kMaxHeaderBytes);", "",
       pytest("tests/python/test_serve.py", "-k", "header_line"))
mutant("pt2serve: a stop does not wait for answers being written", "serve/http_server.cpp",
       "    if (stopping && in_flight == 0 && unsent.empty()) event_base_loopexit(base, nullptr);",
       "    if (stopping && in_flight == 0) event_base_loopexit(base, nullptr);",
       pytest("tests/python/test_serve.py", "-k", "sigterm"))

mutant("pt2serve: a config integer past its range wraps", "serve/repository.cpp",
       "? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&", "?",
       pytest("tests/python/test_serve.py", "-k", "config_values_out_of_range"))
mutant("pt2serve: a name starting with '.' is a model", "serve/repository.cpp",
       "  const bool plain = !name.empty() && name.size() <= 255 && name[0] != '.' &&",
       "  const bool plain = !name.empty() && name.size() <= 255 &&",
       pytest("tests/python/test_serve.py", "-k", "refuses_dot_folders"))
mutant("pt2serve gRPC: an unknown model is INVALID_ARGUMENT", "serve/grpc_service.cpp",
       "      case ErrorKind::NotFound: return StatusCode::NOT_FOUND;",
       "      case ErrorKind::NotFound: return StatusCode::INVALID_ARGUMENT;",
       pytest("tests/python/test_serve.py", "-k", "grpc_errors_carry_the_protocol_status"))
mutant("pt2serve gRPC: gzip requests inflated", "serve/grpc_service.cpp",
       "  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);", "",
       pytest("tests/python/test_serve.py", "-k", "grpc_compressed_requests_are_refused"))
mutant("pt2serve: request bytes held not bounded together", "serve/request_bytes.cpp",
       "  if (receiving_bytes_ + queued_.load(std::memory_order_relaxed) > limit_) over_bound();",
       "",
       pytest("tests/python/test_serve.py", "-k", "bounded_together"))

# --- pt2run's command line
mutant("pt2run: a usage error exits 7, not 2", "runtime/cli/pt2run.cpp",
       "    return pt2rt::exit_code(pt2rt::ErrorCode::Usage);",
       "    return pt2rt::exit_code(pt2rt::ErrorCode::Runtime);",
       matrix("no_subcommand", "run_without_output"))
mutant("pt2run: --iters 0 accepted", "runtime/cli/pt2run.cpp",
       '  bench->add_option("--iters", iters, "measured runs")->check(CLI::PositiveNumber);',
       '  bench->add_option("--iters", iters, "measured runs");',
       matrix("bench_zero_iters"))
mutant("pt2run: error text printed as it is (control characters)", "runtime/cli/pt2run.cpp",
       '<< pt2rt::error_code_name(e.code()) << "): " << printable(e.what()) << "\\n";',
       '<< pt2rt::error_code_name(e.code()) << "): " << e.what() << "\\n";',
       matrix("newline_in_op_name"))

# --- which torch's packages load (runtime/src/compat.cpp)
mutant("compat: a package of a newer torch loads", "runtime/src/compat.cpp",
       "  if (made.major != here.major || made.minor > here.minor) {", "  if (made.major != here.major) {",
       ctest("^Documented[.]APackageFromThisTorchOrAnOlderOne"))
mutant("compat: a local version (+cpu) is no version", "runtime/src/compat.cpp",
       "(tail != 0 && tail != '+' && tail != 'a'", "(tail != 0 && tail != 'a'",
       ctest("^Documented[.]TheLocalVersionOfTorchIsNotCompared$"))

# --- reused run memory (runtime/src/run_memory.cpp)
mutant("run memory: freed blocks never reused", "runtime/src/run_memory.cpp",
       "      if (it != free_.end() && it->first <= 2 * n) {", "      if (false) {",
       ctest("^Runtime[.]ReusedRunMemoryMakesRunIntoAllocateNothingOnceWarm$"))
mutant("run memory: a block handed out twice", "runtime/src/run_memory.cpp",
       "        free_.erase(it);\n", "\n",
       ctest("^Runtime[.]ReusedRunMemory"))

# --- what a package may make the runtime read and write (extract.cpp, package.cpp)
mutant("extract: a second library in the model folder accepted", "runtime/src/extract.cpp",
       "  if (libraries != std::vector<std::string>{variant.record}) {", "  if (false) {",
       matrix("second_library_in_model_folder"))
mutant("extract: max_extracted_bytes not applied", "runtime/src/extract.cpp",
       "  if (total > options.max_extracted_bytes) {", "  if (false) {",
       ctest("^Loading[.]LimitsBoundWhatAPackageCanMakeUsReadAndWrite$"))
mutant("package: a '..' record name accepted", "runtime/src/package.cpp",
       "    if (part == \"..\") return \"a '..' component\";", "",
       matrix("zip_slip"), ctest("^Loading[.]ZipSlip"))

# --- export_tools
mutant("export golden: integers compared with the float tolerance", "export_tools/golden.py",
       "            rtol = atol = 0.0  # integers and bools compare exactly, as the runtime compares them",
       "            pass",
       pytest("tests/python/test_export.py", "-k", "golden_compare_takes_integers"))
mutant("export golden: a degenerate output scaled like the others", "export_tools/golden.py",
       "        atol = effective_atol(scale, atol, None if i in degenerate else atol_rel)",
       "        atol = effective_atol(scale, atol, atol_rel)",
       pytest("tests/python/test_golden_rule.py", "-k", "tolerance_scales"))
mutant("export golden: 'non-finite only' said of finite differences too", "export_tools/golden.py",
       "    if not torch.allclose(a[both].double(), e[both].double(), rtol=rtol, atol=atol):", "    if False:",
       pytest("tests/python/test_export.py", "-k", "differs_only_where_eager_is_not_finite"))
mutant("export compat: a package of a newer torch loads", "export_tools/compat.py",
       "    if made[0] != here[0] or made[1] > here[1]:", "    if made[0] != here[0]:",
       pytest("tests/python/test_compat.py", "-k", "loads_under_its_torch"))
mutant("export compat: a package older than the range loads", "export_tools/compat.py",
       "    if made < OLDEST:", "    if False:",
       pytest("tests/python/test_compat.py", "-k", "loads_under_its_torch"))
mutant("export: weights packed in the portable AVX2 variant too", "export_tools/passes.py",
       '    if name == cpu.NATIVE or (name == "avx512" and cls == "avx512"):',
       '    if name in (cpu.NATIVE, "avx2") or (name == "avx512" and cls == "avx512"):',
       pytest("tests/python/test_export.py", "-k", "packed_only_in_variants"))
mutant("export: linear layers packed on AVX2 (slower than MKL there)", "export_tools/passes.py",
       '"_is_packable_linear": lambda match, cls: cls == "avx512" and _packed_linear(match),',
       '"_is_packable_linear": lambda match, cls: _packed_linear(match),',
       pytest("tests/python/test_export.py", "-k", "packed_only_in_variants"))
mutant("variant: weights packed for another oneDNN class run", "runtime/src/cpu_features.cpp",
       "    if (v.packed_for != here) {", "    if (false) {",
       ctest("^Variants[.]"))
mutant("export: ReLU left for oneDNN to fuse (NaN becomes 0)", "export_tools/passes.py",
       "            if node.target is aten.relu.default:", "            if False:",
       pytest("tests/python/test_export.py", "-k", "keeping_nan_as_eager"))
mutant("export: a package that does not reproduce eager is written", "export_tools/export.py",
       "            if failed:", "            if False:",
       pytest("tests/python/test_export.py", "-k", "failed_verification_leaves_nothing_behind"))
mutant("export: a dynamic batch range with min > max accepted", "export_tools/export.py",
       "        if not 1 <= lo <= hi:", "        if not 1 <= lo:",
       pytest("tests/python/test_export.py", "-k", "bad_arguments"))
mutant("export: a CPU variant asked for twice accepted", "export_tools/cpu.py",
       "    if len(set(names)) != len(names):", "    if False:",
       pytest("tests/python/test_export.py", "-k", "bad_arguments"))

mutant("pt2serve: a folder that is no model name is served", "serve/repository.cpp",
       "    if (is_model_name(name)) {", "    if (true) {",
       pytest("tests/python/test_serve.py", "-k", "refuses_dot_folders or folder_names"))
mutant("pt2serve gRPC: a model that is not ready is INTERNAL", "serve/grpc_service.cpp",
       "      case ErrorKind::Unavailable: return StatusCode::UNAVAILABLE;",
       "      case ErrorKind::Unavailable: return StatusCode::INTERNAL;",
       pytest("tests/python/test_serve.py", "-k", "grpc_errors_carry_the_protocol_status"))
mutant("pt2serve: a model's share of the cores ignores its instance_count", "serve/repository.cpp",
       "      instances += per_version * static_cast<int64_t>(version_folders(m).size());",
       "      instances += static_cast<int64_t>(version_folders(m).size());",
       pytest("tests/python/test_serve.py", "-k", "each_model_runs_on_its_share"))
mutant("recurrent: a split step computes one panel of each piece's gates", "runtime/kernels/rnn_impl.h",
       "    recurrent_product(B, H, Gp, p0, p1, h, h_b, whh, bhh, gh, backward);",
       "    recurrent_product(B, H, Gp, p0, std::min(p1, p0 + 1), h, h_b, whh, bhh, gh, backward);",
       pytest("tests/python/test_recurrent.py", "-k", "split_across_threads"))
mutant("runtime: the usable cores ignore OMP_NUM_THREADS", "runtime/src/cpu_features.cpp",
       "    if (end != omp && n > 0) return", "    if (false) return",
       ctest("^HostCpu[.]UsableCoresFollowOmpNumThreadsElseTheAffinityMask$"))
mutant("runtime: a runtime's intra-op threads not applied to its runs", "runtime/src/process.cpp",
       "  c.set_num_threads(threads);", "",
       ctest("^Runtime[.]IntraOpThreadsSizeEachRunsTeamAndRestoreTheCallers$"))
mutant("pt2serve gRPC: requested outputs ignored", "serve/grpc_infer.cpp",
       "  for (const auto& o : q.outputs()) out.outputs.push_back(output_index(spec, o.name()));", "",
       ctest("^fuzz_replay_grpc_request$"))
mutant("pt2serve: released bodies still count against --max-buffered-mb", "serve/http_server.cpp",
       "    bytes.release(r.counted);", "",
       pytest("tests/python/test_serve.py", "-k", "bounded_together"))
mutant("pt2serve metrics: failures reported as requests", "serve/metrics.cpp",
       "    return std::to_string(m.stats().failures.load());",
       "    return std::to_string(m.stats().requests.load());",
       pytest("tests/python/test_serve.py", "-k", "metrics_count"))
mutant("pt2serve: the runtime's input errors are 500s", "serve/protocol.cpp",
       "    const bool client = e.code() == pt2rt::ErrorCode::Input || e.code() == pt2rt::ErrorCode::Usage;",
       "    const bool client = false;",
       pytest("tests/python/test_serve.py", "-k", "a_bad_request_is_a_400"))
mutant("pt2serve: a full queue answered 500, not 503", "serve/protocol.cpp",
       "    case ErrorKind::Unavailable: return 503;", "    case ErrorKind::Unavailable: return 500;",
       pytest("tests/python/test_serve.py", "-k", "full_queue"))

mutant("pt2run: verify exits 0 on a mismatch", "runtime/cli/pt2run.cpp",
       "  return report.passed() ? kExitOk : kExitMismatch;", "  return kExitOk;",
       ctest("^Verify[.]Pt2runExitsOneOnAMismatch$"))
mutant("pt2run: --intra-op-threads 0 accepted", "runtime/cli/pt2run.cpp",
       "        ->check(CLI::Range(1, pt2rt::kMaxIntraOpThreads))", "        ->check(CLI::Range(0, pt2rt::kMaxIntraOpThreads))",
       ctest("^Pt2run[.]BenchTakesIntraOpThreads$"))
mutant("compat: a package older than the range loads", "runtime/src/compat.cpp",
       "  if (made.major == 2 && made.minor < kOldestMinor) {", "  if (false) {",
       matrix("other_torch_version"))
mutant("spec: a library named by a path accepted", "runtime/src/parse_spec.cpp",
       "      if (lib.empty() || lib == \".\" || lib == \"..\" || lib.find('/') != std::string::npos ||",
       "      if (lib.empty() || lib == \".\" || lib == \"..\" ||",
       matrix("library_named_by_path"))
mutant("run memory: the thread keeps the arena after the run", "runtime/src/run_memory.cpp",
       "  t_arena = previous_;", "",
       ctest("^Runtime[.]ReusedRunMemoryMakesRunIntoAllocateNothingOnceWarm$"))

# --- recurrent layers (export_tools/recurrent.py, runtime/kernels)
mutant("recurrent: layers left for inductor to unroll", "export_tools/recurrent.py",
       "    calls = [n for n in _rnn_calls(ep) if _fusable(n)]", "    calls = []",
       pytest("tests/python/test_recurrent.py", "-k", "rewritten_graph"))
mutant("recurrent: a weight packed once per use", "export_tools/passes.py",
       "        if key in seen:", "        if False:",
       pytest("tests/python/test_recurrent.py", "-k", "one_transpose"))
mutant("kernels: the GRU's update gate applied the wrong way round", "runtime/kernels/rnn_impl.h",
       "  for (int v = 0; v < V; ++v) storev(y + v * L, n[v] + z[v] * (loadv(hp + v * L) - n[v]));",
       "  for (int v = 0; v < V; ++v) storev(y + v * L, z[v] + n[v] * (loadv(hp + v * L) - z[v]));",
       pytest("tests/python/test_recurrent.py", "-k", "kernel_gives"))
mutant("kernels: an LSTM's cell state not carried to the next step", "runtime/kernels/rnn_impl.h",
       "    storev(c + v * L, cj[v]);", "",
       pytest("tests/python/test_recurrent.py", "-k", "kernel_gives"))
mutant("kernels: attention's padded keys keep a score of 0 (a row of negative scores shifted by 0, not its max)",
       "runtime/kernels/attention_impl.h", "  for (int64_t j = lk; j < lkp; ++j) s[j] = kNegInf;", "",
       pytest("tests/python/test_attention.py", "-k", "far_apart"))
mutant("kernels: attention weighs keys far below the row's best e^-86 (e^x's clamp), not 0",
       "runtime/kernels/attention_impl.h", "    storev(s + j, x < low ? zero : exp_v(x));", "    storev(s + j, exp_v(x));",
       pytest("tests/python/test_attention.py", "-k", "past_e_to_the_x"))
mutant("kernels: attention's row of -inf scores comes out NaN", "runtime/kernels/attention_impl.h",
       "  if (top == kNegInf) {", "  if (false) {", pytest("tests/python/test_attention.py", "-k", "past_e_to_the_x"))
mutant("kernels: attention's last 5 rows done as 4", "runtime/kernels/attention_impl.h",
       "    case 5: attention_rows<5>(a, kt, lkp, r, s); break;", "    case 5: attention_rows<4>(a, kt, lkp, r, s); break;",
       pytest("tests/python/test_attention.py", "-k", "kernel_gives"))
mutant("kernels: attention reuses another head's packed keys", "runtime/kernels/attention.cpp",
       "      kernel(head_at(i), r0, std::min(lq, r0 + rows), scratch.data(), packed == i);",
       "      kernel(head_at(i), r0, std::min(lq, r0 + rows), scratch.data(), packed >= 0);",
       pytest("tests/python/test_attention.py", "-k", "kernel_gives"))
mutant("lite: attention reuses another head's packed keys", "runtime/lite/ops.cpp",
       "          kernel(head, r0, std::min(lq, r0 + rows), mine, packed == i);",
       "          kernel(head, r0, std::min(lq, r0 + rows), mine, packed >= 0);",
       pytest("tests/python/test_lite.py", "-k", "matches_eager"))
mutant("export: attention with a mask rewritten as pt2rt::attention", "export_tools/attention.py",
       '    if (args["attn_mask"] is not None or args["dropout_p"] != 0.0 or args["is_causal"] is not False',
       '    if (args["dropout_p"] != 0.0 or args["is_causal"] is not False',
       pytest("tests/python/test_attention.py", "-k", "rewritten"))
mutant("kernels: linear's blocks of weight rows after the first start from the bias again",
       "runtime/kernels/pointwise_impl.h", "      if (blk.k0 == 0) acc[i][v] = blk.init[v];",
       "      if (true) acc[i][v] = blk.init[v];",
       pytest("tests/python/test_linear.py", "-k", "input_order"))
mutant("kernels: linear's activation applied after every block of weight rows", "runtime/kernels/pointwise_impl.h",
       "  if (blk.k1 == a.k) lin_activate<R, V>(acc, blk.act);",
       "  lin_activate<R, V>(acc, blk.act);",
       pytest("tests/python/test_linear.py", "-k", "input_order"))
mutant("kernels: GELU's erf without its sign (erf(-x) = erf(x))", "runtime/kernels/pointwise_impl.h",
       "    storev(p + i * L, y * half * (one + (x < splat(0.0f) ? -m : m)));",
       "    storev(p + i * L, y * half * (one + m));",
       pytest("tests/python/test_linear.py", "-k", "gelu_as_eager"))
mutant("kernels: linear's one- or two-row calls leave their last panel", "runtime/kernels/pointwise_impl.h",
       "  for (; q < panels; ++q) lin_few_tile<R, 1>(a, q, act);",
       "  for (; q + 1 < panels; ++q) lin_few_tile<R, 1>(a, q, act);",
       pytest("tests/python/test_linear.py", "-k", "input_order"))
mutant("kernels: linear's threads split by panels from the second panel's columns", "runtime/kernels/pointwise.h",
       "    part.weight += u0 * whole.k * kLinearPanel;", "    part.weight += u0 * kLinearPanel;",
       pytest("tests/python/test_linear.py", "-k", "thread_count"))
mutant("lite: linear reads a 3-d view's rows as if contiguous", "runtime/lite/ops.cpp",
       "    if (!strided_rows && !in.is_contiguous()) {", "    if (false) {",
       pytest("tests/python/test_lite.py", "-k", "matches_eager"))
mutant("export: a linear layer whose weight is tied to an embedding rewritten (its weight stored twice)",
       "export_tools/linear.py",
       "    return [n for n in fusable if all(u in chosen and _args(u)[1] is _args(n)[1] for u in _args(n)[1].users)]",
       "    return fusable", pytest("tests/python/test_linear.py", "-k", "rewritten"))
mutant("export: a weight laid out in panels where one of its layers stays ATen's (stored twice)",
       "export_tools/linear.py", "    return [n for n in fusable if all(u in chosen and _args(u)[1] is _args(n)[1]",
       "    return [n for n in fusable if all((_args(u) is not None) and _args(u)[1] is _args(n)[1]",
       pytest("tests/python/test_linear.py", "-k", "stays_whole"))
mutant("export: a weight's panels laid out among the graph's inputs", "export_tools/linear.py",
       "    with graph.inserting_before(first_use):", "    with graph.inserting_after(w):",
       pytest("tests/python/test_linear.py", "-k", "after_the_graphs_inputs"))
mutant("export: tanh-approximated GELU fused as exact GELU", "export_tools/linear.py",
       '            "approximate", act.args[1] if len(act.args) > 1 else "none") != "none":',
       '            "approximate", act.args[1] if len(act.args) > 1 else "none") == "never":',
       pytest("tests/python/test_linear.py", "-k", "rewritten"))
mutant("export: linear layers of any row count rewritten", "export_tools/linear.py",
       "    few_rows = convolutions.example_numel(xv.shape[:-1]) <= MAX_ROWS",
       "    few_rows = True", pytest("tests/python/test_linear.py", "-k", "many_rows"))
mutant("export: linear layers of many rows stay ATen's whatever their features", "export_tools/linear.py",
       "(few_rows or xv.shape[-1] <= ONE_BLOCK_FEATURES)", "few_rows",
       pytest("tests/python/test_linear.py", "-k", "many_rows"))
mutant("export: static-row linear layers rewritten where oneDNN packs them", "export_tools/linear.py",
       "            and not _packed_by_onednn(x, onednn))", "            )",
       pytest("tests/python/test_linear.py", "-k", "oneDNN_packs"))
mutant("export: a package of portable variants leaves static-row linear layers to oneDNN", "export_tools/linear.py",
       "    return any(passes.packing_class_of(name) == \"avx512\" for name in (variants or [cpu.NATIVE]))",
       "    return passes.onednn_class() == \"avx512\"",
       pytest("tests/python/test_linear.py", "-k", "oneDNN_packs"))
mutant("kernels: the product's rows of 4 done for the first strip of each panel only", "runtime/kernels/rnn_impl.h",
       "    for (int64_t j = 0; j < kPanel; j += kStrip) {", "    for (int64_t j = 0; j < kStrip; j += kStrip) {",
       pytest("tests/python/test_recurrent.py", "-k", "kernel_gives"))
mutant("runtime: keep_freed_memory leaves blocks past 32 MiB to mmap", "runtime/src/malloc_policy.cpp",
       " && mallopt(M_MMAP_MAX, 0) == 1 &&", " &&",
       ctest("^Runtime[.]KeepFreedMemory$"))
mutant("runtime: keep_freed_memory lets a thread arena's next heap go", "runtime/src/malloc_policy.cpp",
       " && mallopt(M_TOP_PAD, retain) == 1;", ";",
       ctest("^Runtime[.]KeepFreedMemoryKeepsAThreadArenasNextHeap$"))
mutant("runtime: MKL keeps its generic code on AMD", "runtime/src/mkl_vendor.cpp",
       '  return has("avx2") && has("fma");', "  return false;",
       ctest("^Variants[.]MklRuns"))
mutant("kernels: a depthwise block's border pixels take every tap, the padding's too", "runtime/kernels/depthwise_impl.h",
       "        if (kChecked && (kx < kx0[p] || kx >= kx1[p])) continue;", "",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a depthwise row's unchecked blocks reach one pixel into the right border", "runtime/kernels/depthwise_impl.h",
       "  if (ox >= inner0 && ox + kPix <= inner1) {", "  if (ox >= inner0 && ox + kPix <= inner1 + 1) {",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a depthwise row skips the 4 channels past its whole vectors", "runtime/kernels/depthwise_impl.h",
       "    if (c0 + 4 <= c1) depthwise_block<4, 1, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0), c0 += 4;",
       "    if (c0 + 4 <= c1) c0 += 4;",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a slid depthwise block reads past the row's right end", "runtime/kernels/depthwise_impl.h",
       "      if (kChecked && (ix0 + i < 0 || ix0 + i >= d.w)) continue;",
       "      if (kChecked && ix0 + i < 0) continue;",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a slid depthwise block at stride 2 takes the inputs between its taps", "runtime/kernels/depthwise_impl.h",
       "        if (i >= kx && (i - kx) % S == 0 && p < kPix) acc[p] += x * wv[kx];",
       "        if (i >= kx && p < kPix) acc[p] += x * wv[kx];",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a depthwise row's slid blocks reach one pixel into the right border", "runtime/kernels/depthwise_impl.h",
       "  const bool inside = ox >= inner0 && ox + kPix <= inner1;",
       "  const bool inside = ox >= inner0 && ox + kPix <= inner1 + 1;",
       pytest("tests/python/test_depthwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: a pointwise tile leaves out its last partial vector of columns", "runtime/kernels/pointwise_impl.h",
       "      else if (v * L < left) pw_store_part(out + i * out_rs + v * L, acc[i][v], left - v * L);", "",
       pytest("tests/python/test_pointwise.py", "-k", "torchs_answer and not isa"))
mutant("kernels: the pointwise clamps turn NaN into their bound", "runtime/kernels/pointwise_impl.h",
       "  t = t < a.lo ? a.lo : t;", "  t = t > a.lo ? t : a.lo;",
       pytest("tests/python/test_pointwise.py", "-k", "non_finite and not isa"))
mutant("kernels: SiLU and sigmoid see e^-y clamped below float's range, not inf past it", "runtime/kernels/exp_impl.h",
       "  const vf c = clamp_or_nan(x, -86.0f, 89.0f);", "  const vf c = clamp_or_nan(x, -86.0f, 88.0f);",
       pytest("tests/python/test_pointwise.py", "-k", "non_finite and not isa"))
mutant("kernels: e^x's polynomial off in its cubic term by 1e-4", "runtime/kernels/exp_impl.h",
       "  p = p * r + splat(2 * 0.1666652068865686f);", "  p = p * r + splat(2 * 0.1666f);",
       pytest("tests/python/test_pointwise.py", "-k", "few_ulp"))
mutant("export: pointwise convolutions keep their batch norm out of the weight", "export_tools/convolutions.py",
       "    weight = call_fn(aten.mul.Tensor, (weight, call_fn(aten.view.default, (scale, scale_shape))))",
       "    pass",
       pytest("tests/python/test_pointwise.py", "-k", "rewritten_graph"))
mutant("export: a depthwise convolution's activation left out of its call", "export_tools/convolutions.py",
       "            call = call_fn(torch.ops.pt2rt.depthwise_conv2d_act.default, (x, taps, b, *geometry, name))",
       '            call = call_fn(torch.ops.pt2rt.depthwise_conv2d_act.default, (x, taps, b, *geometry, "none"))',
       pytest("tests/python/test_depthwise.py", "-k", "rewritten_graph"))
mutant("kernels: a depthwise row's activation leaves out the row's last partial vector", "runtime/kernels/pointwise_impl.h",
       "    pw_store_part(p + i, v[0][0], n - i);", "",
       pytest("tests/python/test_depthwise.py", "-k", "activation_after_the_sum"))
mutant("kernels: Winograd tiles with an inf or NaN output are not computed again directly",
       "runtime/kernels/winograd_impl.h", "    if (probe != probe) wg_direct_tile(a, tile, act);", "",
       pytest("tests/python/test_winograd.py", "-k", "non_finite and not isa"))
mutant("kernels: Winograd's output transform adds the last row's products", "runtime/kernels/winograd_impl.h",
       "    y[1][l] = s[1][l] - s[2][l] - s[3][l];", "    y[1][l] = s[1][l] - s[2][l] + s[3][l];",
       pytest("tests/python/test_winograd.py", "-k", "within_rounding and not isa"))
mutant("export: a 3x3 convolution's batch norm left out of its Winograd weight", "export_tools/convolutions.py",
       "            weight, b = _fold_batch_norm(graph, bn, weight, b, [cout, 1, 1, 1])",
       "            _, b = _fold_batch_norm(graph, bn, weight, b, [cout, 1, 1, 1])",
       pytest("tests/python/test_winograd.py", "-k", "rewritten_graph"))
mutant("export: Winograd's transformed weights past the package budget", "export_tools/convolutions.py",
       "        if _winograd_extra_bytes(conv) <= left:", "        if True:",
       pytest("tests/python/test_winograd.py", "-k", "budget"))
mutant("lite: the pointwise and Winograd shims read a view of some of an image's channels as if it held them all",
       "runtime/lite/ops.cpp", "    if (in.sizes[d] > 1 && in.strides[d] != dense[d]) {",
       "    if (false && in.strides[d] != dense[d]) {",
       pytest("tests/python/test_lite.py", "-k", "matches_eager"))
mutant("kernels: MKL's recurrent product without b_hh", "runtime/kernels/rnn.cpp",
       "std::memcpy(self.bias[group].get() + k * n, self.bhh + k * self.H + u0, sizeof(float) * n);",
       "std::memset(self.bias[group].get() + k * n, 0, sizeof(float) * n);",
       pytest("tests/python/test_recurrent.py", "-k", "mkls_product"))
mutant("kernels: MKL packs and multiplies at the process's thread count", "runtime/kernels/rnn.cpp",
       "    const int threads = self.m->set_num_threads_local(1);", "    const int threads = self.m->set_num_threads_local(0);",
       pytest("tests/python/test_recurrent.py", "-k", "mkls_product"))
mutant("kernels: a split step's piece run by every member that reaches it", "runtime/kernels/rnn_impl.h",
       "    if (!claims_[p].phase.compare_exchange_strong(before, k, std::memory_order_relaxed)) return;",
       "    claims_[p].phase.compare_exchange_strong(before, k, std::memory_order_relaxed);",
       ctest("^Modes/SplitSteps[.]"))
mutant("kernels: a split step's members do not wait for each other's pieces", "runtime/kernels/rnn_impl.h",
       "      for (uint32_t spins = 1; done_.load(std::memory_order_acquire) < all; ++spins) {",
       "      for (uint32_t spins = 1; false && done_.load(std::memory_order_acquire) < all; ++spins) {",
       ctest("^Modes/SplitSteps[.]"))
mutant("kernels: a step's piece updates only its first group of units (MKL's product)", "runtime/kernels/rnn_impl.h",
       "    for (int64_t u = u0; u < u1; u += by->units) {", "    for (int64_t u = u0; u < std::min(u1, u0 + 1); u += by->units) {",
       pytest("tests/python/test_recurrent.py", "-k", "mkls_product"))
mutant("kernels: the reverse direction run forwards", "runtime/kernels/rnn.cpp",
       "out.data_ptr<float>() + d * s.H, out_t, out_b, d == 1,", "out.data_ptr<float>() + d * s.H, out_t, out_b, false,",
       ctest("^Runtime[.]RecurrentLayersRun"))


# --- custom ops in pt2rt-lite (export_tools/lite.py, runtime/lite/ops_libraries.cpp, ops/identity_conv_lite.cpp)
mutant("lite ops: a bool argument declared 64 bits wide", "export_tools/lite.py",
       '"bool": ["int32_t {n}"]', '"bool": ["int64_t {n}"]',
       pytest("tests/python/test_lite.py", "-k", "c_declarations"))
mutant("lite ops: a given library the package does not name loaded anyway", "runtime/lite/ops_libraries.cpp",
       "    if (!wanted.count(basename_of(lib))) {", "    if (false) {",
       pytest("tests/python/test_lite.py", "-k", "full_ops_library"))
mutant("lite ops: the entry's output laid out contiguous, not as empty_like", "ops/identity_conv_lite.cpp",
       "    lite::Tensor out = lite::Tensor::empty_like(in);",
       "    lite::Tensor out = lite::Tensor::empty_contiguous(in.sizes(), 4, t);",
       pytest("tests/python/test_lite.py", "-k", "lite_entry_keeps_the_layout"))


# ---------------------------------------------------------------------------------------------------------------

def text_problems(mutants):
    """Each mutant's text must occur exactly once in its file: a mutant whose text is gone (or ambiguous) proves
    nothing."""
    bad = []
    for m in mutants:
        path = ROOT / m.file
        count = path.read_text().count(m.old) if path.is_file() else 0
        if count != 1:
            bad.append((m.name, f"mutant '{m.name}': its text occurs {count} times in {m.file} (expected once): "
                                f"{m.old!r}"))
    return bad


def ctest_program() -> str:
    """The ctest beside this Python (the venv's CMake, which configured the build), else the one on PATH."""
    return shutil.which("ctest", path=str(Path(sys.executable).parent)) or "ctest"


def ctest_names(build_dir: Path) -> list[str]:
    out = subprocess.run([ctest_program(), "--test-dir", str(build_dir), "-N"], capture_output=True, text=True,
                         check=True)
    return re.findall(r"^\s*Test\s+#\d+: (\S+)", out.stdout, re.M)


def gtest_names(binary: Path) -> list[str]:
    out = subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
    names, suite = [], ""
    for line in out.splitlines():
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        elif line.strip():
            names.append(suite + line.split("#")[0].strip())
    return names


def gtest_matches(name: str, gtest_filter: str) -> bool:
    """gtest's --gtest_filter: ':'-separated globs, then after '-' the negative ones."""
    from fnmatch import fnmatchcase
    positive, _, negative = gtest_filter.partition("-")
    return (any(fnmatchcase(name, p) for p in (positive or "*").split(":"))
            and not any(fnmatchcase(name, p) for p in negative.split(":") if p))


def pytest_counts(arg_lists: list[tuple]) -> list[int]:
    """How many tests each pytest selector collects, in this one process (a process per selector imports torch
    again each time)."""
    import pytest as pt

    class Count:
        n = 0

        def pytest_collection_finish(self, session):
            Count.n = len(session.items)

    counts = []
    for args in arg_lists:
        Count.n = 0
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            pt.main(["--collect-only", "-q", "-p", "no:cacheprovider", *args],
                    plugins=[Count()])
        counts.append(Count.n)
    return counts


def selector_problems(mutants, build_dir: Path):
    """Each selector must select at least one test: a selector that names nothing passes with any mutant."""
    bad = []
    ctests = None
    gtests: dict[str, list[str]] = {}
    pytests = []
    for m in mutants:
        for sel in m.selectors:
            if sel[0] == "ctest":
                if ctests is None:
                    ctests = ctest_names(build_dir)
                n = sum(1 for t in ctests if re.search(sel[1], t))
            elif sel[0] == "gtest":
                if sel[1] not in gtests:
                    gtests[sel[1]] = gtest_names(build_dir / "bin" / sel[1])
                n = sum(1 for t in gtests[sel[1]] if gtest_matches(t, sel[2]))
            else:
                pytests.append((m, sel))
                continue
            if n == 0:
                bad.append((m.name, f"mutant '{m.name}': its selector {describe(sel)} selects no test"))
    os.chdir(ROOT)
    for (m, sel), n in zip(pytests, pytest_counts([sel[1:] for _, sel in pytests])):
        if n == 0:
            bad.append((m.name, f"mutant '{m.name}': its selector {describe(sel)} selects no test"))
    return bad


def describe(sel) -> str:
    return " ".join([sel[0], *map(shlex.quote, sel[1:])])


def command(sel, build_dir: Path) -> list[str]:
    if sel[0] == "ctest":
        return [ctest_program(), "--test-dir", str(build_dir), "-R", sel[1], "--no-tests=error"]
    if sel[0] == "gtest":
        return [str(build_dir / "bin" / sel[1]), f"--gtest_filter={sel[2]}"]
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *sel[1:]]


def passes(sel, build_dir: Path, env) -> bool:
    return subprocess.run(command(sel, build_dir), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def build(build_dir: Path) -> bool:
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    return subprocess.run([cmake, "--build", str(build_dir)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", type=Path, required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    build_dir = a.build_dir.resolve()
    n_export = sum(m.file.startswith("export_tools/") for m in MUTANTS)
    n_serve = sum(m.file.startswith("serve/") for m in MUTANTS)

    if a.check:
        bad = text_problems(MUTANTS) + selector_problems(MUTANTS, build_dir)
        for _, line in bad:
            print(line, file=sys.stderr)
        print(f"{len(MUTANTS)} mutants ({n_export} in export_tools, {n_serve} in serve/): "
              f"{len(MUTANTS) - len({name for name, _ in bad})} with their text exactly once and every selector "
              "selecting a test", file=sys.__stdout__, flush=True)
        return 1 if bad else 0

    chosen = [m for m in MUTANTS if not a.names or any(n in m.name for n in a.names)]
    if not chosen:
        print(f"error: no mutant's name contains any of: {' '.join(a.names)}", file=sys.stderr)
        return 2
    bad = text_problems(chosen)
    if bad:
        print("\n".join(line for _, line in bad), file=sys.stderr)
        return 2
    if not build(build_dir):
        print(f"error: cmake --build {build_dir} fails without any mutant", file=sys.stderr)
        return 2
    env = dict(os.environ, IDENTITY_CONV_OPS_LIBRARY=str(build_dir / "lib" / "libidentity_conv_ops.so"),
               PT2RT_KERNELS_LIBRARY=str(build_dir / "lib" / "libpt2rt_kernels.so"),
               PT2RT_LITE_LIBRARY=str(build_dir / "lib" / "libpt2rt_lite.so"),
               PT2RT_TEST_PACKAGES_DIR=str(build_dir / "test-packages"))
    # Each selector must pass on the unmutated source, or a "killed" below would mean nothing.
    for sel in dict.fromkeys(s for m in chosen for s in m.selectors):
        if not passes(sel, build_dir, env):
            print(f"error: fails without any mutant: {describe(sel)}", file=sys.stderr)
            return 2

    survived = 0
    start = time.monotonic()
    print(f"{'mutant':<64} result")
    for m in chosen:
        path = ROOT / m.file
        original = path.read_text()
        try:
            path.write_text(original.replace(m.old, m.new))
            if not build(build_dir):
                result = "killed (does not build)"
            else:
                failing = next((s for s in m.selectors if not passes(s, build_dir, env)), None)
                if failing:
                    result = "killed by " + describe(failing)
                else:
                    result = "SURVIVED (" + "; ".join(map(describe, m.selectors)) + ")"
                    survived += 1
        finally:
            path.write_text(original)
        print(f"{m.name:<64} {result}", flush=True)
    build(build_dir)
    minutes = (time.monotonic() - start) / 60
    if survived:
        print(f"{survived} of {len(chosen)} mutants survived ({minutes:.0f} min)")
        return 1
    print(f"every mutant killed: {len(chosen)} ({minutes:.0f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
