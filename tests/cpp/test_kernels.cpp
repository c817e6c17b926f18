// The recurrence's steps split across threads (runtime/kernels/rnn_impl.h: Phases), torch-free: every split, and
// members that run at once, one after another or late, give one thread's answer bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../runtime/kernels/rnn_kernel.h"

namespace {

using pt2rt::kernels::RnnMode;
using pt2rt::kernels::RnnParallelFn;
using pt2rt::kernels::RnnProduct;

// the ways a caller's threads may run a layer's members
void one_after_another(int64_t parts, void* ctx, void (*member)(void*, int64_t, int64_t)) {
  for (int64_t p = 0; p < parts; ++p) member(ctx, p, p + 1);
}

void all_at_once(int64_t parts, void* ctx, void (*member)(void*, int64_t, int64_t)) {
  std::vector<std::thread> threads;
  for (int64_t p = 0; p < parts; ++p) threads.emplace_back(member, ctx, p, p + 1);
  for (auto& t : threads) t.join();
}

// the first member starts well after the others have waited for its pieces (a descheduled thread)
void first_one_late(int64_t parts, void* ctx, void (*member)(void*, int64_t, int64_t)) {
  std::vector<std::thread> threads;
  threads.emplace_back([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    member(ctx, 0, 1);
  });
  for (int64_t p = 1; p < parts; ++p) threads.emplace_back(member, ctx, p, p + 1);
  for (auto& t : threads) t.join();
}

// two members, the first with two pieces, the second with the rest
void uneven(int64_t parts, void* ctx, void (*member)(void*, int64_t, int64_t)) {
  std::thread second(member, ctx, 2, parts);
  member(ctx, 0, 2);
  second.join();
}

const std::pair<const char*, RnnParallelFn> kWays[] = {
    {"one after another", &one_after_another}, {"all at once", &all_at_once}, {"first one late", &first_one_late},
    {"uneven", &uneven}};

struct Layer {
  RnnMode mode;
  int64_t T, B, H, G, Gp;
  std::vector<float> gi, whh, bhh, h0, c0;

  Layer(RnnMode m, int64_t t, int64_t b, int64_t h) : mode(m), T(t), B(b), H(h) {
    G = (m == RnnMode::Gru ? 3 : m == RnnMode::Lstm ? 4 : 1) * H;
    Gp = pt2rt::kernels::padded_gates(G);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto fill = [&](std::vector<float>& v, size_t n, float scale) {
      v.resize(n);
      for (auto& x : v) x = normal(rng) * scale;
    };
    fill(gi, T * B * G, 1.0f);
    fill(whh, Gp * H, 1.0f / 16);
    fill(bhh, Gp, 0.1f);
    fill(h0, B * H, 0.5f);
    fill(c0, B * H, 0.5f);
  }

  // out (T x B x H), then hn and cn
  std::vector<float> run(RnnParallelFn parallel, int64_t parts, const RnnProduct* product = nullptr,
                         bool reverse = false) const {
    std::vector<float> out(T * B * H + 2 * B * H, -1.0f), scratch(B * (Gp + H));
    float* hn = out.data() + T * B * H;
    const bool lstm = mode == RnnMode::Lstm;
    pt2rt::kernels::rnn_steps_baseline()(mode, T, B, H, gi.data(), B * G, G, whh.data(), bhh.data(), h0.data(),
                                         lstm ? c0.data() : nullptr, out.data(), B * H, H, reverse, hn,
                                         lstm ? hn + B * H : nullptr, scratch.data(), parallel, parts, product);
    return out;
  }
};

// A caller's product (rnn_kernel.h: RnnProduct): every gate of a group of units, plain loops
struct PlainProduct {
  const Layer* layer;
  static void fn(void* ctx, int64_t u0, const float* h, int64_t h_b, float* g) {
    const Layer& l = *static_cast<const PlainProduct*>(ctx)->layer;
    const int64_t gates = l.G / l.H, n = std::min<int64_t>(64, l.H - u0), panel = pt2rt::kernels::kPanel;
    for (int64_t b = 0; b < l.B; ++b) {
      for (int64_t k = 0; k < gates; ++k) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t c = k * l.H + u0 + i;
          float sum = l.bhh[c];
          const float* column = l.whh.data() + (c / panel) * l.H * panel + c % panel;
          for (int64_t j = 0; j < l.H; ++j) sum += h[b * h_b + j] * column[j * panel];
          g[(b * gates + k) * n + i] = sum;
        }
      }
    }
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class SplitSteps : public ::testing::TestWithParam<RnnMode> {};

TEST_P(SplitSteps, EveryWayOfRunningTheMembersGivesOneThreadsAnswer) {
  // steps large enough to split (B * H * padded gates >= kSplitStepFrom), 4 pieces at most (16-unit cuts, panels)
  const Layer layer(GetParam(), 9, 2, 256);
  for (const bool reverse : {false, true}) {
    const std::vector<float> one = layer.run(nullptr, 1, nullptr, reverse);
    const std::vector<float> wrong = Layer(GetParam(), 9, 2, 256).run(nullptr, 1, nullptr, !reverse);
    ASSERT_FALSE(same_bits(one, wrong)) << "the directions should differ";
    for (const auto& [name, fn] : kWays) {
      for (const int64_t parts : {2, 3, 4}) {
        EXPECT_TRUE(same_bits(layer.run(fn, parts, nullptr, reverse), one))
            << name << ", " << parts << " pieces, reverse " << reverse;
      }
    }
  }
}

TEST_P(SplitSteps, ACallersProductSplitsTheSameWay) {
  const Layer layer(GetParam(), 7, 3, 256);
  PlainProduct plain{&layer};
  const RnnProduct product{&plain, &PlainProduct::fn, 64};
  const std::vector<float> one = layer.run(nullptr, 1, &product);
  const std::vector<float> own = layer.run(nullptr, 1);
  // the same recurrence by another product: close, and the state really went through it
  for (size_t i = 0; i < one.size(); ++i) ASSERT_NEAR(one[i], own[i], 1e-4) << i;
  for (const auto& [name, fn] : kWays) {
    EXPECT_TRUE(same_bits(layer.run(fn, 4, &product), one)) << name;
  }
}

// The scratch the callers give rnn_steps: on whole lines (a split step's pieces write side by side in it), every
// float of it usable
TEST(AlignedFloats, StartsOnALineAndHoldsWhatWasAsked) {
  for (const int64_t n : {0, 1, 15, 16, 17, 1000, 8 * (1024 + 256)}) {
    const pt2rt::kernels::AlignedFloats a(n), b(n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 64, 0u) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u) << n;
    for (int64_t i = 0; i < n; ++i) a.data()[i] = static_cast<float>(i);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a.data()[i], static_cast<float>(i)) << n;
  }
}

std::string mode_name(const ::testing::TestParamInfo<RnnMode>& info) {
  static const char* const names[] = {"Gru", "Tanh", "Relu", "Lstm"};
  return names[static_cast<int>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Modes, SplitSteps,
                         ::testing::Values(RnnMode::Lstm, RnnMode::Gru, RnnMode::Tanh, RnnMode::Relu), mode_name);

}  // namespace
