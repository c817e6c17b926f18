// my_ops through the dispatcher and the custom-class registry, as a program that dlopens the library sees them.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/custom_class.h>

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

void load_ops_library() {
  static void* handle = dlopen(IDENTITY_CONV_OPS_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(handle, nullptr) << "dlopen " << IDENTITY_CONV_OPS_LIBRARY << ": " << dlerror();
}

at::Tensor identity_conv_op(const at::Tensor& x) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("my_ops::identity_conv_op", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.call(x);
}

// A my_ops.IdentityConvClass object made and used through the registry, like TorchScript and AOTI do.
class ConvObject {
 public:
  ConvObject(int64_t channels, int64_t kernel_size) {
    type_ = torch::getCustomClass("__torch__.torch.classes.my_ops.IdentityConvClass");
    obj_ = c10::ivalue::Object::create(c10::StrongTypePtr(nullptr, type_), 1);
    call("__init__", {channels, kernel_size});
  }
  explicit ConvObject(c10::IValue obj) : type_(obj.type()->expect<c10::ClassType>()), obj_(obj.toObject()) {}

  c10::IValue call(const std::string& method, std::vector<c10::IValue> args) const {
    torch::jit::Stack stack{c10::IValue(obj_)};
    for (auto& a : args) stack.push_back(std::move(a));
    type_->getMethod(method).run(stack);
    return stack.empty() ? c10::IValue() : stack.back();
  }
  at::Tensor forward(const at::Tensor& x) const { return call("forward", {x}).toTensor(); }
  void set_weight(const at::Tensor& w) const { call("set_weight", {w}); }
  at::Tensor get_weight() const { return call("get_weight", {}).toTensor(); }
  c10::IValue ivalue() const { return c10::IValue(obj_); }

 private:
  c10::ClassTypePtr type_;
  c10::intrusive_ptr<c10::ivalue::Object> obj_;
};

struct Case {
  at::ScalarType dtype;
  c10::DeviceType device;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c10::DeviceTypeName(c.device, true) << "/" << c.dtype; }

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(c10::DeviceTypeName(info.param.device, true)) + "_" + c10::toString(info.param.dtype);
}

void skip_without_device(c10::DeviceType device) {
  if (device == c10::kCUDA && !at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
}

// The tolerances of ops/tests/test_identity_conv_class.py for the same kernels: torch.testing's defaults, and for half
// precision an atol of one rounding of the result (the kernel sums k*k products in float32 and rounds once; the
// reference is float64 rounded once).
std::pair<double, double> tolerances(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return {1e-3, 2e-3};
    case at::kBFloat16: return {1.6e-2, 1.6e-2};
    case at::kDouble: return {1e-7, 1e-7};
    default: return {1.3e-6, 1e-5};
  }
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected) {
  ASSERT_EQ(actual.sizes(), expected.sizes());
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type());
  const auto [rtol, atol] = tolerances(actual.scalar_type());
  const at::Tensor a = actual.to(at::kCPU, at::kDouble), e = expected.to(at::kCPU, at::kDouble);
  EXPECT_TRUE(at::allclose(a, e, rtol, atol)) << "max abs error " << (a - e).abs().max().item<double>();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "<no error>";
}

class OpsTest : public testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { load_ops_library(); }
  void SetUp() override { skip_without_device(GetParam().device); }
  at::TensorOptions options() const { return at::TensorOptions().dtype(GetParam().dtype).device(GetParam().device); }
};

TEST_P(OpsTest, IdentityOpReturnsACopyOfTheInput) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 3, 16, 16}, {1, 1, 1, 1}, {4, 8, 7, 5}, {0, 3, 4, 4}}) {
    const at::Tensor x = at::randn(shape, options());
    const at::Tensor y = identity_conv_op(x);
    EXPECT_TRUE(at::equal(y, x)) << "shape " << x.sizes();
    EXPECT_EQ(y.strides(), x.strides());
    if (x.numel() > 0) EXPECT_NE(y.data_ptr(), x.data_ptr());
  }
}

TEST_P(OpsTest, IdentityOpKeepsLayouts) {
  const at::Tensor base = at::randn({2, 6, 9, 11}, options());
  const at::Tensor channels_last = base.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y = identity_conv_op(channels_last);
  EXPECT_TRUE(at::equal(y, base));
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  const at::Tensor sliced = base.slice(2, 1, 9, 2).slice(3, 0, 11, 3);  // not dense
  y = identity_conv_op(sliced);
  EXPECT_TRUE(at::equal(y, sliced));
  EXPECT_TRUE(y.is_contiguous());
  const at::Tensor permuted = base.permute({0, 1, 3, 2});  // dense, not contiguous
  y = identity_conv_op(permuted);
  EXPECT_TRUE(at::equal(y, permuted));
  EXPECT_EQ(y.strides(), permuted.strides());
}

TEST_P(OpsTest, ClassWithDefaultWeightIsTheIdentity) {
  for (int64_t k : {1, 3, 5, 7}) {
    ConvObject conv(5, k);
    const at::Tensor x = at::randn({2, 5, 9, 8}, options());
    EXPECT_TRUE(at::equal(conv.forward(x), x)) << "k=" << k;
  }
}

TEST_P(OpsTest, ClassForwardMatchesATenDepthwiseConv) {
  for (int64_t k : {1, 3, 5, 7}) {
    const int64_t C = 6;
    ConvObject conv(C, k);
    const at::Tensor w = at::randn({C, 1, k, k});
    conv.set_weight(w);
    // 4x56 takes every vector block width of the CPU row kernels; 40x700 splits each plane between two tasks.
    for (const auto& hw : std::vector<std::pair<int64_t, int64_t>>{{13, 17}, {2, 3}, {1, 1}, {4, 56}, {40, 700}}) {
      const at::Tensor x = at::randn({3, C, hw.first, hw.second}, options());
      // Reference in float64 from the same (rounded) input.
      const at::Tensor ref = at::conv2d(x.to(at::kCPU, at::kDouble), w.to(at::kDouble), {}, 1, k / 2, 1, C);
      expect_close(conv.forward(x), ref.to(GetParam().dtype));
      expect_close(conv.forward(x.contiguous(at::MemoryFormat::ChannelsLast)), ref.to(GetParam().dtype));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsTest,
                         testing::Values(Case{at::kFloat, c10::kCPU}, Case{at::kDouble, c10::kCPU},
                                         Case{at::kHalf, c10::kCPU}, Case{at::kBFloat16, c10::kCPU},
                                         Case{at::kFloat, c10::kCUDA}, Case{at::kDouble, c10::kCUDA},
                                         Case{at::kHalf, c10::kCUDA}, Case{at::kBFloat16, c10::kCUDA}),
                         case_name);

class OpsErrors : public testing::Test {
 protected:
  static void SetUpTestSuite() { load_ops_library(); }
};

TEST_F(OpsErrors, OpRejectsWrongRankAndDtype) {
  EXPECT_NE(error_of([] { identity_conv_op(at::randn({3, 4, 5})); })
                .find("expected a 4-D NCHW tensor, got a 3-D tensor of shape [3, 4, 5]"),
            std::string::npos);
  EXPECT_NE(error_of([] { identity_conv_op(at::ones({1, 1, 2, 2}, at::kLong)); })
                .find("expected dtype float32, float64, float16 or bfloat16, got Long"),
            std::string::npos);
}

TEST_F(OpsErrors, ClassRejectsBadArguments) {
  EXPECT_NE(error_of([] { ConvObject(3, 4); }).find("expected an odd kernel_size in 1..7, got 4"), std::string::npos);
  EXPECT_NE(error_of([] { ConvObject(3, 9); }).find("got 9"), std::string::npos);
  EXPECT_NE(error_of([] { ConvObject(0, 3); }).find("expected channels >= 1, got 0"), std::string::npos);
  ConvObject conv(3, 3);
  EXPECT_NE(error_of([&] { conv.forward(at::randn({1, 4, 5, 5})); }).find("expected an input with 3 channels"),
            std::string::npos);
  EXPECT_NE(error_of([&] { conv.forward(at::randn({4, 5, 5})); }).find("expected a 4-D NCHW tensor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { conv.forward(at::ones({1, 3, 5, 5}, at::kInt)); }).find("got Int"), std::string::npos);
  EXPECT_NE(error_of([&] { conv.set_weight(at::randn({3, 1, 5, 5})); })
                .find("expected a weight of shape [3, 1, 3, 3], got [3, 1, 5, 5]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { conv.set_weight(at::ones({3, 1, 3, 3}, at::kLong)); }).find("got Long"), std::string::npos);
}

TEST_F(OpsErrors, PickleRoundTripKeepsTheWeight) {
  ConvObject conv(4, 5);
  const at::Tensor w = at::randn({4, 1, 5, 5});
  conv.set_weight(w);
  const std::vector<char> bytes = torch::jit::pickle_save(conv.ivalue());
  ConvObject loaded(torch::jit::pickle_load_obj(std::string_view(bytes.data(), bytes.size())));
  EXPECT_TRUE(at::equal(loaded.get_weight(), w));
  const at::Tensor x = at::randn({2, 4, 6, 6});
  EXPECT_TRUE(at::equal(loaded.forward(x), conv.forward(x)));
}

TEST_F(OpsErrors, GetWeightReturnsACopy) {
  ConvObject conv(2, 3);
  conv.get_weight().fill_(7.0);
  const at::Tensor x = at::randn({1, 2, 4, 4});
  EXPECT_TRUE(at::equal(conv.forward(x), x));
}

// Many threads call forward on one object while another replaces its weight: every result must be the
// output of one of the two weights, never a mix or a crash - and both must be seen, or the calls never overlapped
// a replacement and the test showed nothing.
TEST_F(OpsErrors, ForwardIsThreadSafe) {
  const int64_t C = 8;
  ConvObject conv(C, 3);
  const at::Tensor w1 = at::zeros({C, 1, 3, 3});
  w1.select(2, 1).select(2, 1).fill_(1.0);
  const at::Tensor w2 = at::randn({C, 1, 3, 3});
  const at::Tensor x = at::randn({2, C, 32, 32});
  const at::Tensor out1 = at::conv2d(x, w1, {}, 1, 1, 1, C), out2 = at::conv2d(x, w2, {}, 1, 1, 1, C);
  std::atomic<int> bad{0}, done{0}, saw1{0}, saw2{0}, sets{0};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    for (int i = 0; done.load() < 8; ++i, ++sets) conv.set_weight(i % 2 ? w1 : w2);
  });
  // a hang guard, not a verdict: the replacements go on until every reader is done
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      // at least 200 calls each, more until both weights were seen while replacements went on
      for (int i = 0; (i < 200 || saw1.load() == 0 || saw2.load() == 0) && std::chrono::steady_clock::now() < give_up;
           ++i) {
        const at::Tensor y = conv.forward(x);
        if (at::allclose(y, out1, 1e-5, 1e-5)) {
          ++saw1;
        } else if (at::allclose(y, out2, 1e-5, 1e-5)) {
          ++saw2;
        } else {
          ++bad;
        }
      }
      ++done;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(saw1.load(), 0) << sets.load() << " replacements";
  EXPECT_GT(saw2.load(), 0) << sets.load() << " replacements";
}

}  // namespace
