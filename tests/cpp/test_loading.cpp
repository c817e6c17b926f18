// Loading packages safely: many threads loading valid and broken packages at once, the host's own temporary
// files, a second copy of an ops library, stale directories of dead processes, bounded reads.
#include <pt2rt/aten.h>
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "test_env.h"
#include "test_shell.h"

namespace fs = std::filesystem;

namespace {

const std::string kPackages = test_packages_dir();
const std::string kNet = kPackages + "/net_dynamic.pt2";
const std::string kOp = kPackages + "/op_static.pt2";
const std::string kOps = IDENTITY_CONV_OPS_LIBRARY;

pt2rt::Options with_ops() {
  pt2rt::Options o;
  o.ops_libraries = {kOps};
  return o;
}

// TMPDIR pointed at a fresh directory for one test (set before any thread starts, restored after).
class PrivateTmpdir {
 public:
  PrivateTmpdir() {
    dir_ = fs::temp_directory_path() / ("pt2rt-test-" + std::to_string(getpid()) + "-" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (const char* old = std::getenv("TMPDIR")) old_ = old;
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  ~PrivateTmpdir() {
    if (old_.empty()) {
      unsetenv("TMPDIR");
    } else {
      setenv("TMPDIR", old_.c_str(), 1);
    }
    fs::remove_all(dir_);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  std::string old_;
};

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

TEST(Loading, ConcurrentLoadsOfValidAndBrokenPackagesWhileTheHostUsesTmpdir) {
  PrivateTmpdir tmp;
  const at::Tensor x = at::randn({3, 3, 32, 32});
  const at::Tensor expected = pt2rt::run(pt2rt::Runtime::load(kNet, with_ops()), {x}).at(0);
  const std::vector<std::string> broken = {kPackages + "/bad/damaged_lib.pt2", kPackages + "/bad/zip_slip.pt2",
                                           kPackages + "/bad/missing_feature.pt2",
                                           kPackages + "/bad/second_library.pt2"};
  constexpr int kThreads = 8, kLoadsPerThread = 30;
  std::atomic<int> valid_ok{0}, valid_failed{0}, broken_refused{0}, broken_loaded{0}, wrong_answers{0};
  std::atomic<bool> stop{false};
  std::atomic<int> active{0};
  std::vector<std::string> failures;
  std::mutex failures_mutex;

  // The host program's own temporary files, created while packages load: every one must survive.
  std::vector<fs::path> host_files;
  std::thread host([&] {
    for (int i = 0; !stop || i < 50; ++i) {
      const fs::path f = tmp.dir() / ("host-" + std::to_string(i) + ".txt");
      std::ofstream(f) << i;
      host_files.push_back(f);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++active;
      for (int i = 0; i < kLoadsPerThread; ++i) {
        const int pick = (t + i) % 6;
        try {
          if (pick < 2) {
            const pt2rt::Runtime rt = pt2rt::Runtime::load(pick == 0 ? kNet : kOp, with_ops());
            if (pick == 0 && !at::allclose(pt2rt::run(rt, {x}).at(0), expected, 1e-5, 1e-5)) ++wrong_answers;
            if (pick == 1 && rt.spec().model != "op_static") ++wrong_answers;
            ++valid_ok;
          } else {
            pt2rt::Runtime::load(broken[static_cast<size_t>(pick - 2)], with_ops());
            ++broken_loaded;
          }
        } catch (const pt2rt::Error& e) {
          if (pick < 2) {
            ++valid_failed;
            std::lock_guard<std::mutex> lock(failures_mutex);
            failures.push_back(e.what());
          } else {
            ++broken_refused;
          }
        }
      }
      --active;
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  host.join();

  EXPECT_EQ(valid_failed.load(), 0) << (failures.empty() ? "" : failures.front());
  EXPECT_EQ(valid_ok.load(), kThreads * kLoadsPerThread / 3);
  EXPECT_EQ(wrong_answers.load(), 0);
  EXPECT_EQ(broken_loaded.load(), 0);
  EXPECT_EQ(broken_refused.load(), kThreads * kLoadsPerThread * 2 / 3);
  for (const auto& f : host_files) EXPECT_TRUE(fs::exists(f)) << "the host lost " << f;
  for (const auto& name : entries(tmp.dir())) {
    EXPECT_EQ(name.rfind("host-", 0), 0u) << "left behind in TMPDIR: " << name;
  }
}

// The directories below this process's private one (one per distinct extracted content).
std::vector<std::string> extractions(const fs::path& tmpdir) {
  std::vector<std::string> out;
  for (const auto& parent : entries(tmpdir)) {
    if (parent.rfind("pt2rt-", 0) != 0) continue;
    EXPECT_EQ(fs::status(tmpdir / parent).permissions() & fs::perms::all, fs::perms::owner_all) << parent;
    for (const auto& e : entries(tmpdir / parent)) out.push_back(e);
  }
  return out;
}

TEST(Loading, ARuntimeKeepsItsFilesUntilDestroyedAndNoLonger) {
  PrivateTmpdir tmp;
  {
    const pt2rt::Runtime a = pt2rt::Runtime::load(kNet, with_ops());
    {
      const pt2rt::Runtime b = pt2rt::Runtime::load(kNet, with_ops());  // same content: shares a's files
      const pt2rt::Runtime c = pt2rt::Runtime::load(kOp, with_ops());
      EXPECT_EQ(extractions(tmp.dir()).size(), 2u);
    }
    EXPECT_EQ(extractions(tmp.dir()).size(), 1u);  // c's are gone, a's stay
    EXPECT_TRUE(a.verify().passed());
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

long rss_kb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

int mappings() {
  std::ifstream f("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

TEST(Loading, LoadAndDestroyAThousandTimesWithBoundedMemoryAndMappings) {
  // Each load used to map the model library once more (never unloaded): +0.3 MB and 6 mappings per load.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator holds freed memory and maps its own regions (LeakSanitizer checks "
                  "leaks in the ASan build)";
#endif
  PrivateTmpdir tmp;
  const auto cycle = [&](int i) {
    const pt2rt::Runtime rt = pt2rt::Runtime::load(i % 2 ? kOp : kNet, with_ops());
    const auto x = rt.example_inputs();
    rt.run({x[0].view()});
  };
  for (int i = 0; i < 50; ++i) cycle(i);
  const long rss = rss_kb();
  const int maps = mappings();
  for (int i = 0; i < 1000; ++i) cycle(i);
  EXPECT_LT(rss_kb() - rss, 16 * 1024) << "RSS grew from " << rss << " kB";
  EXPECT_LE(mappings(), maps + 4);
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

TEST(Loading, APackageReplacedWhileLoadingNeverMixesTwoPackages) {
  // A hot reload that renames new packages over the path while loads run: every load reads spec, library and
  // golden cases through one open file, so it is wholly one package or the other, never a mix.
  PrivateTmpdir tmp;
  const fs::path path = tmp.dir() / "model.pt2";
  const fs::path net = tmp.dir() / "net.pt2", op = tmp.dir() / "op.pt2";
  fs::copy_file(kNet, net);
  fs::copy_file(kOp, op);
  fs::copy_file(net, path);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    for (int i = 0; !stop; ++i) {
      const fs::path next = tmp.dir() / "next.pt2";
      fs::copy_file(i % 2 ? net : op, next, fs::copy_options::overwrite_existing);
      fs::rename(next, path);
    }
  });
  int loaded = 0;
  for (int i = 0; i < 40; ++i) {
    const pt2rt::Runtime rt = pt2rt::Runtime::load(path.string(), with_ops());
    const std::string model = rt.spec().model;
    EXPECT_TRUE(model == "net_dynamic" || model == "op_static") << model;
    const pt2rt::VerifyReport report = rt.verify();  // golden cases of the same package as the spec and library
    EXPECT_TRUE(report.passed()) << model << ": " << (report.cases.empty() ? "" : report.cases[0].reason);
    ++loaded;
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(loaded, 40);
}

// Open file descriptors of this process that point at `path`.
int open_descriptors_of(const fs::path& path) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec) == path) ++n;
  }
  return n;
}

TEST(Loading, WithoutKeepPackageOpenNoFileIsHeldAndAReplacedPackageIsNotVerified) {
  // pt2serve with 1,000 versions loaded held 1,009 package files open: the runtime kept each for verify().
  PrivateTmpdir tmp;
  const fs::path path = tmp.dir() / "model.pt2";
  fs::copy_file(kNet, path);
  pt2rt::Options o = with_ops();
  const pt2rt::Runtime kept = pt2rt::Runtime::load(path.string(), o);
  EXPECT_EQ(open_descriptors_of(path), 1);
  o.keep_package_open = false;
  {
    const pt2rt::Runtime closed = pt2rt::Runtime::load(path.string(), o);
    EXPECT_EQ(open_descriptors_of(path), 1);  // kept's only
    EXPECT_TRUE(closed.verify().passed());
    EXPECT_EQ(closed.example_inputs().size(), 1u);
    EXPECT_EQ(open_descriptors_of(path), 1);
    // another file renamed over the path: kept still verifies its own; closed refuses rather than read another's
    const fs::path next = tmp.dir() / "next.pt2";
    fs::copy_file(kOp, next);
    fs::rename(next, path);
    EXPECT_TRUE(kept.verify().passed());
    try {
      closed.verify();
      ADD_FAILURE() << "verify() read the golden cases of a package that was not the one loaded";
    } catch (const pt2rt::Error& e) {
      EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package);
      EXPECT_NE(std::string(e.what()).find("is not the file that was loaded"), std::string::npos) << e.what();
    }
    const std::vector<float> x(3 * 32 * 32, 1.0f);  // it runs on: only the golden cases are refused
    EXPECT_EQ(closed.run({pt2rt::TensorView{x.data(), {1, 3, 32, 32}, pt2rt::DType::Float32}}).size(), 1u);
  }
  EXPECT_EQ(open_descriptors_of(path), 0);  // the path is another file now; kept holds the one it loaded
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(Loading, FromMemoryAsFromAFileWithNothingLeftBehind) {
  // A game's asset or a download: the bytes are freed right after the load, no package file exists.
  PrivateTmpdir tmp;
  const std::vector<float> x(2 * 3 * 32 * 32, 0.25f);
  const pt2rt::TensorView in{x.data(), {2, 3, 32, 32}, pt2rt::DType::Float32};
  std::string isa;
  std::vector<pt2rt::Tensor> expected;
  {
    const pt2rt::Runtime from_file = pt2rt::Runtime::load(kNet, with_ops());
    expected = from_file.run({in});
    isa = from_file.variant().isa;
  }
  {
    auto bytes = std::make_unique<std::vector<char>>(bytes_of(kNet));
    pt2rt::Options o = with_ops();
    o.cpu_isa = isa;
    o.num_runners = 2;
    const pt2rt::Runtime rt = pt2rt::Runtime::load_from_memory(bytes->data(), bytes->size(), o);
    std::fill(bytes->begin(), bytes->end(), 0);
    bytes.reset();
    EXPECT_EQ(rt.spec().model, "net_dynamic");
    EXPECT_EQ(rt.variant().isa, isa);
    const std::vector<pt2rt::Tensor> got = rt.run({in});
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0].nbytes(), expected[0].nbytes());
    EXPECT_EQ(std::memcmp(got[0].data(), expected[0].data(), got[0].nbytes()), 0);
    EXPECT_TRUE(rt.verify().passed());  // the golden cases were kept
    EXPECT_EQ(rt.example_inputs().size(), 1u);
    EXPECT_EQ(extractions(tmp.dir()).size(), 1u);
  }
  // keep_package_open off: nothing but the model is kept, verify() says why it cannot
  {
    const std::vector<char> bytes = bytes_of(kNet);
    pt2rt::Options o = with_ops();
    o.keep_package_open = false;
    const pt2rt::Runtime rt = pt2rt::Runtime::load_from_memory(bytes.data(), bytes.size(), o);
    try {
      rt.verify();
      ADD_FAILURE() << "verify() without golden cases";
    } catch (const pt2rt::Error& e) {
      EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package);
      EXPECT_NE(std::string(e.what()).find("loaded with keep_package_open off: its golden cases were not kept"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
  // the same checks as a file: damaged, hostile and empty packages are refused, nothing is written
  for (const char* bad : {"truncated.pt2", "damaged_lib.pt2", "zip_slip.pt2", "random.pt2", "library_path.pt2"}) {
    const std::vector<char> bytes = bytes_of(kPackages + "/bad/" + bad);
    try {
      pt2rt::Runtime::load_from_memory(bytes.data(), bytes.size(), with_ops());
      ADD_FAILURE() << bad << " was loaded from memory";
    } catch (const pt2rt::Error& e) {
      EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package) << bad << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("the package in memory ("), std::string::npos) << bad << ": " << e.what();
    }
    EXPECT_TRUE(entries(tmp.dir()).empty()) << bad;
  }
  const char none = 0;
  EXPECT_THROW(pt2rt::Runtime::load_from_memory(&none, 0, with_ops()), pt2rt::Error);
  try {
    pt2rt::Runtime::load_from_memory(nullptr, 100, with_ops());
    ADD_FAILURE() << "NULL bytes were read";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::Usage) << e.what();
  }
}

TEST(Loading, ConcurrentLoadsFromMemory) {
  PrivateTmpdir tmp;
  const std::vector<char> net = bytes_of(kNet), op = bytes_of(kOp), bad = bytes_of(kPackages + "/bad/damaged_lib.pt2");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        const std::vector<char>& bytes = (t + i) % 3 == 0 ? net : (t + i) % 3 == 1 ? op : bad;
        try {
          const pt2rt::Runtime rt = pt2rt::Runtime::load_from_memory(bytes.data(), bytes.size(), with_ops());
          if (&bytes == &bad || !rt.verify().passed()) ++failures;
        } catch (const pt2rt::Error& e) {
          if (&bytes != &bad || e.code() != pt2rt::ErrorCode::Package) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

TEST(Loading, ZipSlipWritesNothingOutsideTheRuntimesDirectory) {
  PrivateTmpdir tmp;
  const fs::path target = "/tmp/pt2rt-zip-slip-target";
  fs::remove(target);
  EXPECT_THROW(pt2rt::Runtime::load(kPackages + "/bad/zip_slip.pt2", with_ops()), pt2rt::Error);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

TEST(Loading, LimitsBoundWhatAPackageCanMakeUsReadAndWrite) {
  PrivateTmpdir tmp;
  pt2rt::Options o = with_ops();
  o.max_record_bytes = 1 << 16;  // the model library is larger
  try {
    pt2rt::Runtime::load(kNet, o);
    ADD_FAILURE() << "a record over max_record_bytes was read";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::Package);
    EXPECT_NE(std::string(e.what()).find("at most 65536 are accepted"), std::string::npos) << e.what();
  }
  o = with_ops();
  o.max_extracted_bytes = 1 << 16;
  try {
    pt2rt::Runtime::load(kNet, o);
    ADD_FAILURE() << "extracted more than max_extracted_bytes";
  } catch (const pt2rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(Options::max_extracted_bytes)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(entries(tmp.dir()).empty());
}

TEST(Loading, ASecondCopyOfAnOpsLibraryIsNotLoaded) {
  // Loading a second file that registers my_ops again would abort the process (TORCH_LIBRARY twice).
  PrivateTmpdir tmp;
  const pt2rt::Runtime first = pt2rt::Runtime::load(kNet, with_ops());
  const fs::path copy = tmp.dir() / "copy" / "libidentity_conv_ops.so";
  fs::create_directories(copy.parent_path());
  fs::copy_file(kOps, copy);
  pt2rt::Options o;
  o.ops_libraries = {copy.string()};
  const pt2rt::Runtime second = pt2rt::Runtime::load(kNet, o);
  EXPECT_TRUE(second.ops_libraries().empty()) << "loaded " << second.ops_libraries().front();
  EXPECT_TRUE(second.verify().passed());
}

int shell(const std::string& command) { return test_shell::exit_code(command); }

TEST(Loading, ANamespaceRegisteredWithoutWhatThePackageNeedsIsRefusedNotLoadedTwice) {
  // my_ops is registered (the library is loaded) but lacks my_ops::not_there: loading a second file that registers
  // my_ops would abort the process, so load() refuses, naming the namespace.
  PrivateTmpdir tmp;
  pt2rt::Runtime::load(kNet, with_ops());
  const fs::path copy = tmp.dir() / "copy" / "libidentity_conv_ops.so";
  fs::create_directories(copy.parent_path());
  fs::copy_file(kOps, copy);
  pt2rt::Options o;
  o.ops_libraries = {copy.string()};
  try {
    pt2rt::Runtime::load(kPackages + "/bad/missing_op.pt2", o);
    ADD_FAILURE() << "loaded a package whose op is registered nowhere";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::OpsLibrary);
    EXPECT_NE(std::string(e.what()).find("namespace my_ops is already registered in this process"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(entries(tmp.dir()) == std::vector<std::string>{"copy"});
}

TEST(Loading, TheLibraryNextToAPackageIsNotLoadedUnlessAskedFor) {
  // Opening a package must not run code from wherever it was downloaded: a package whose spec names
  // libnot_there.so, with a file of that name next to it (not a library: loading it would say so).
  PrivateTmpdir tmp;
  const fs::path dir = tmp.dir() / "download";
  fs::create_directories(dir);
  fs::copy_file(kPackages + "/bad/unknown_library.pt2", dir / "net.pt2");
  std::ofstream(dir / "libnot_there.so") << "not a library";
  const std::string err = (tmp.dir() / "err.txt").string();
  const std::string pt2run = "env -i " + pt2run_command() + " verify " + (dir / "net.pt2").string();
  EXPECT_EQ(shell(pt2run + " 2>" + err), 4);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("needs libnot_there.so, which was not found"), std::string::npos) << text;
  EXPECT_EQ(shell(pt2run + " --ops-from-package-dir 2>" + err), 4);
  std::ifstream again(err);
  const std::string tried((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  EXPECT_NE(tried.find("cannot load ops library " + (dir / "libnot_there.so").string()), std::string::npos) << tried;
}

TEST(Loading, GoldenInputsAreCheckedBeforeTheyAreCopied) {
  // The golden record's first input claims 430 GB (stride 0 in a small file): the case fails on its shape,
  // nothing is allocated for it, and the other cases still run.
  const pt2rt::Runtime rt = pt2rt::Runtime::load(kPackages + "/bad/golden_stride0.pt2", with_ops());
  const pt2rt::VerifyReport report = rt.verify();
  ASSERT_EQ(report.cases.size(), 4u);
  EXPECT_FALSE(report.passed());
  EXPECT_FALSE(report.cases[0].passed);
  EXPECT_EQ(report.cases[0].reason, "input 0 (x): dim 0 (batch) must be in 1..32, got 35000000");
  for (size_t i = 1; i < report.cases.size(); ++i) EXPECT_TRUE(report.cases[i].passed) << report.cases[i].reason;
}

TEST(Loading, TensorFilesAreBoundedBeforeTheyAreCopied) {
  try {
    pt2rt::load_tensors(kPackages + "/stride0_huge.pt", std::size_t{1} << 30);
    ADD_FAILURE() << "a 430 GB tensor was accepted";
  } catch (const pt2rt::Error& e) {
    EXPECT_EQ(e.code(), pt2rt::ErrorCode::IO);
    EXPECT_NE(std::string(e.what()).find("holds tensors of 430080000000 bytes once made contiguous; at most "
                                         "1073741824 are accepted here"),
              std::string::npos)
        << e.what();
  }
}

TEST(Loading, StaleDirectoriesOfDeadProcessesAreRemoved) {
  PrivateTmpdir tmp;
  const fs::path dead = tmp.dir() / "pt2rt-999999999-abcdef";  // above Linux's largest pid
  const fs::path alive = tmp.dir() / ("pt2rt-" + std::to_string(getppid()) + "-abcdef");
  const fs::path mine = tmp.dir() / ("pt2rt-" + std::to_string(getpid()) + "-abcdef");
  const fs::path other = tmp.dir() / "pt2rt-not-a-pid";
  for (const auto& d : {dead, alive, mine, other}) fs::create_directories(d / "data");
  EXPECT_EQ(pt2rt::remove_stale_temp_dirs(), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive) && fs::exists(mine) && fs::exists(other));
}

}  // namespace
