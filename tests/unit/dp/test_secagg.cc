// Pairwise masks for secure aggregation (dp/secagg.h): both ends derive one key, keys differ
// between pairs and runs, bad public keys are refused naming the peer, the masks of simulated
// worlds cancel exactly in the sum modulo 2^32, a masked zero vector looks uniform, and masking
// range by range gives what masking whole gives.
//
// The keystream's known answer is RFC 8439's block-function test vector (section 2.3.2); the
// uniformity bound is the chi-square quantile computed here from the regularized incomplete
// gamma function, itself checked against closed forms.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dp/secagg.h"
#include "runtime/core/error.h"
#include "tests/unit/dp/errors.h"

namespace dp = dpg::dp;

namespace {

using dpg::testing::contains;

// The dpg::Error that `f()` throws, its code and message; fails the test otherwise.
template <class F>
std::pair<dpg::Code, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const dpg::Error& e) {
    return {e.code(), e.what()};
  }
  FAIL("expected a dpg::Error");
  return {dpg::Code::internal, ""};
}

// Q(a, x) = Gamma(a, x) / Gamma(a), the regularized upper incomplete gamma function: a series
// below x = a + 1, Lentz's continued fraction above (Numerical Recipes, 6.2).
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 100000 && std::abs(term) > std::abs(sum) * 1e-17; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

// The x with P(chi-square(dof) > x) = p, by bisection (the tail falls as x grows).
double chi_square_upper_quantile(int dof, double p) {
  double lo = 0, hi = dof + 100.0 * std::sqrt(2.0 * dof) + 100;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (gamma_q(0.5 * dof, 0.5 * mid) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Each peer's key pair, then the masker each builds from the others' public keys, as a run would.
std::vector<dp::PairwiseMasker> simulated_world(int n, std::uint64_t context) {
  std::vector<dp::SecAggKeyPair> pairs;
  std::vector<std::array<unsigned char, 32>> publics;
  for (int r = 0; r < n; ++r) {
    pairs.push_back(dp::SecAggKeyPair::generate());
    publics.push_back(pairs.back().public_key());
  }
  std::vector<dp::PairwiseMasker> maskers;
  for (int r = 0; r < n; ++r) {
    std::vector<std::optional<dp::PairKey>> keys(n);
    for (int p = 0; p < n; ++p) {
      if (p != r) keys[p] = dp::agree_pair_key(pairs[r], publics[p], r, p, context);
    }
    maskers.emplace_back(r, std::move(keys));
  }
  return maskers;
}

dp::PairKey some_key(unsigned char seed) {
  dp::PairKey k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<unsigned char>(seed * 31 + i);
  return k;
}

}  // namespace

TEST_CASE("the chi-square quantile helper matches closed forms") {
  // dof 2: P(X > x) = exp(-x / 2), so x = -2 log p.
  for (double p : {0.5, 0.05, 1e-6}) {
    CHECK(chi_square_upper_quantile(2, p) == doctest::Approx(-2 * std::log(p)).epsilon(1e-9));
  }
  // dof 1: X = Z^2, P(X > x) = erfc(sqrt(x / 2)).
  for (double x : {0.5, 3.0, 20.0}) {
    const double p = std::erfc(std::sqrt(x / 2));
    CHECK(chi_square_upper_quantile(1, p) == doctest::Approx(x).epsilon(1e-7));
  }
  // Large dof: near the Wilson-Hilferty approximation.
  const double k = 255, z = 4.753424308822899;  // the normal's upper 1e-6 quantile
  const double wh = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
  CHECK(chi_square_upper_quantile(255, 1e-6) == doctest::Approx(wh).epsilon(2e-3));
}

TEST_CASE("both ends of a pair derive the same key; pairs and runs do not share one") {
  const std::uint64_t context = 0x1234'5678'9abc'def0ULL;
  auto a = dp::SecAggKeyPair::generate(), b = dp::SecAggKeyPair::generate(),
       c = dp::SecAggKeyPair::generate();
  const auto pa = a.public_key(), pb = b.public_key(), pc = c.public_key();
  CHECK(pa != pb);

  const dp::PairKey ab = dp::agree_pair_key(a, pb, 0, 1, context);
  CHECK(ab == dp::agree_pair_key(b, pa, 1, 0, context));
  const dp::PairKey ac = dp::agree_pair_key(a, pc, 0, 2, context);
  CHECK(ac == dp::agree_pair_key(c, pa, 2, 0, context));
  const dp::PairKey bc = dp::agree_pair_key(b, pc, 1, 2, context);
  CHECK(bc == dp::agree_pair_key(c, pb, 2, 1, context));

  std::set<dp::PairKey> seen{ab, ac, bc};
  CHECK(seen.size() == 3);
  // The same two keys under other rank labels, or in another run, give other keys.
  seen.insert(dp::agree_pair_key(a, pb, 0, 2, context));
  seen.insert(dp::agree_pair_key(a, pb, 1, 0, context));
  seen.insert(dp::agree_pair_key(a, pb, 0, 1, context + 1));
  seen.insert(dp::agree_pair_key(b, pa, 1, 0, 0));
  CHECK(seen.size() == 7);
  // A key is not the all-zero string, and a fresh key pair gives another key.
  CHECK(ab != dp::PairKey{});
  auto a2 = dp::SecAggKeyPair::generate();
  CHECK(dp::agree_pair_key(a2, pb, 0, 1, context) != ab);

  // Moves hand the key over.
  dp::SecAggKeyPair moved(std::move(a));
  CHECK(moved.public_key() == pa);
  CHECK(dp::agree_pair_key(moved, pb, 0, 1, context) == ab);
  const auto [code, what] = error_of([&] { (void)a.public_key(); });  // NOLINT(bugprone-use-after-move)
  CHECK(code == dpg::Code::failed_precondition);
  a = std::move(moved);
  CHECK(a.public_key() == pa);
}

TEST_CASE("an invalid public key is refused as data loss naming the peer") {
  auto mine = dp::SecAggKeyPair::generate();
  const auto good = dp::SecAggKeyPair::generate().public_key();
  auto refused = [&](std::span<const unsigned char> theirs) {
    const auto [code, what] = error_of([&] { dp::agree_pair_key(mine, theirs, 0, 3, 7); });
    CHECK(code == dpg::Code::data_loss);
    CHECK(contains(what, "peer 3 sent an invalid secure-aggregation public key"));
  };
  refused(std::span<const unsigned char>(good.data(), 31));
  refused(std::span<const unsigned char>());
  const std::vector<unsigned char> longer(33, 9);
  refused(longer);

  // Points of small order (RFC 7748 section 6.1; the list libsodium and others refuse): u = 0,
  // u = 1, the two points of order 8, and u = p - 1, p, p + 1 (the top bit is ignored).
  auto hex = [](const char* s) {
    std::array<unsigned char, 32> out{};
    for (int i = 0; i < 32; ++i) out[i] = static_cast<unsigned char>(std::stoi(std::string(s + 2 * i, 2), nullptr, 16));
    return out;
  };
  const char* small_order[] = {
      "0000000000000000000000000000000000000000000000000000000000000000",
      "0100000000000000000000000000000000000000000000000000000000000000",
      "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
      "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
      "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "0000000000000000000000000000000000000000000000000000000000000080",
  };
  for (const char* s : small_order) {
    CAPTURE(s);
    refused(hex(s));
  }
  // The good key still works, and bad ranks are the caller's error.
  CHECK(dp::agree_pair_key(mine, good, 0, 3, 7) != dp::PairKey{});
  CHECK(error_of([&] { dp::agree_pair_key(mine, good, 2, 2, 7); }).first ==
        dpg::Code::invalid_argument);
  CHECK(error_of([&] { dp::agree_pair_key(mine, good, -1, 2, 7); }).first ==
        dpg::Code::invalid_argument);
}

TEST_CASE("the keystream is ChaCha20's: RFC 8439's block-function test vector") {
  // Key 00 01 .. 1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00 (step, little-endian, then the
  // zero word), block counter 1: words 16 to 31.
  dp::PairKey key{};
  for (int i = 0; i < 32; ++i) key[i] = static_cast<unsigned char>(i);
  const std::uint64_t step = 0x4a00'0000'0900'0000ULL;
  const std::uint32_t want[16] = {0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3,
                                  0xc7f4d1c7, 0x0368c033, 0x9aaa2204, 0x4e6cd4c3,
                                  0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9,
                                  0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2};
  std::vector<std::uint32_t> v(16, 0);
  dp::add_pair_mask(v, key, step, false, 16);
  for (int i = 0; i < 16; ++i) CHECK(v[i] == want[i]);
  // Subtracting is adding the negation modulo 2^32.
  std::vector<std::uint32_t> w(16, 5);
  dp::add_pair_mask(w, key, step, true, 16);
  for (int i = 0; i < 16; ++i) CHECK(w[i] == std::uint32_t(5 - want[i]));
}

TEST_CASE("masks cancel exactly in the sum modulo 2^32 over 4 and 5 peers") {
  std::mt19937_64 gen(2024);
  for (int n : {4, 5}) {
    auto maskers = simulated_world(n, 0xfeedULL + n);
    for (bool zeros : {false, true}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{17}, std::size_t{1001}, std::size_t{4099}}) {
        CAPTURE(n);
        CAPTURE(zeros);
        CAPTURE(count);
        std::vector<std::vector<std::uint32_t>> plain(n, std::vector<std::uint32_t>(count, 0));
        if (!zeros) {
          for (auto& v : plain) {
            for (auto& x : v) x = static_cast<std::uint32_t>(gen());
          }
        }
        const std::uint64_t step = 100 + count;
        std::vector<std::uint32_t> want(count, 0), got(count, 0);
        for (int r = 0; r < n; ++r) {
          auto masked = plain[r];
          maskers[r].mask(masked, step);
          CHECK(masked != plain[r]);
          for (std::size_t i = 0; i < count; ++i) {
            want[i] += plain[r][i];
            got[i] += masked[i];
          }
        }
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("a masked zero vector looks uniform") {
  auto maskers = simulated_world(3, 99);
  std::vector<std::uint32_t> v(std::size_t{1} << 20, 0);
  maskers[1].mask(v, 5);  // one mask added (with rank 2), one subtracted (with rank 0)

  std::array<double, 256> counts{};
  double sum = 0;
  for (std::uint32_t w : v) {
    for (int b = 0; b < 4; ++b) counts[(w >> (8 * b)) & 0xff] += 1;
    sum += w;
  }
  const double bytes = 4.0 * static_cast<double>(v.size()), expected = bytes / 256;
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
  const double bound = chi_square_upper_quantile(255, 1e-6);
  CAPTURE(chi2);
  CAPTURE(bound);
  CHECK(bound > 255);
  CHECK(chi2 < bound);

  // Words uniform on [0, 2^32): mean 2^31 - 1/2, standard deviation about 2^32 / sqrt(12).
  const double n = static_cast<double>(v.size());
  const double mean = sum / n, se = 4294967296.0 / std::sqrt(12.0) / std::sqrt(n);
  CAPTURE(mean);
  CHECK(std::abs(mean - (2147483648.0 - 0.5)) < 6 * se);
}

TEST_CASE("masks differ between steps, keys and signs") {
  const auto k = some_key(1);
  std::vector<std::uint32_t> a(4096, 0), b(4096, 0), c(4096, 0);
  dp::add_pair_mask(a, k, 0, false);
  dp::add_pair_mask(b, k, 1, false);
  dp::add_pair_mask(c, some_key(2), 0, false);
  int same_ab = 0, same_ac = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  CHECK(same_ab <= 2);  // 4096 words alike by chance: about 1e-6 expected
  CHECK(same_ac <= 2);
  // Adding then subtracting the same mask restores the vector.
  std::vector<std::uint32_t> d(4096, 0);
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint32_t>(i * 2654435761u);
  auto e = d;
  dp::add_pair_mask(e, k, 3, false);
  CHECK(e != d);
  dp::add_pair_mask(e, k, 3, true);
  CHECK(e == d);
  // The same step through a masker is deterministic.
  dp::PairwiseMasker m(0, {std::nullopt, k});
  std::vector<std::uint32_t> f(100, 0), g(100, 0);
  m.mask(f, 8);
  m.mask(g, 8);
  CHECK(f == g);
}

TEST_CASE("masking range by range gives what masking whole gives") {
  const auto key = some_key(7);
  std::mt19937 gen(5);
  for (bool subtract : {false, true}) {
    std::vector<std::uint32_t> base(5000);
    for (auto& x : base) x = gen();
    auto whole = base;
    dp::add_pair_mask(whole, key, 42, subtract);
    // Cuts inside blocks, on block edges and across the 1024-word chunks the keystream comes in.
    const std::vector<std::size_t> cuts = {0, 1, 15, 16, 17, 33, 1000, 1023, 1024, 1025, 2100, 4999,
                                           5000};
    auto pieces = base;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      std::span<std::uint32_t> s(pieces.data() + cuts[i], cuts[i + 1] - cuts[i]);
      dp::add_pair_mask(s, key, 42, subtract, cuts[i]);
    }
    CAPTURE(subtract);
    CHECK(pieces == whole);
    // An offset range alone, too.
    auto tail = std::vector<std::uint32_t>(base.begin() + 777, base.end());
    dp::add_pair_mask(tail, key, 42, subtract, 777);
    CHECK(std::equal(tail.begin(), tail.end(), whole.begin() + 777));
  }
}

TEST_CASE("bad arguments: the counter's reach, and maskers without the right keys") {
  const auto key = some_key(3);
  std::vector<std::uint32_t> one(1, 0), two(2, 0);
  const std::size_t reach = std::size_t{1} << 36;  // 2^32 blocks of 16 words
  dp::add_pair_mask(one, key, 0, false, reach - 1);  // the last word: fine
  CHECK(error_of([&] { dp::add_pair_mask(two, key, 0, false, reach - 1); }).first ==
        dpg::Code::invalid_argument);
  CHECK(error_of([&] { dp::add_pair_mask(one, key, 0, false, reach); }).first ==
        dpg::Code::invalid_argument);
  std::vector<std::uint32_t> none;
  dp::add_pair_mask(none, key, 0, false, reach * 2);  // empty: nothing to do

  auto [code, what] = error_of([&] { dp::PairwiseMasker(1, {key, std::nullopt, std::nullopt}); });
  CHECK(code == dpg::Code::invalid_argument);
  CHECK(contains(what, "peer 2"));
  CHECK(error_of([&] { dp::PairwiseMasker(0, {key, key}); }).first == dpg::Code::invalid_argument);
  CHECK(error_of([&] { dp::PairwiseMasker(2, {std::nullopt, key}); }).first ==
        dpg::Code::invalid_argument);
  // A world of one masks nothing.
  dp::PairwiseMasker alone(0, {std::nullopt});
  std::vector<std::uint32_t> v = {1, 2, 3};
  alone.mask(v, 0);
  CHECK(v == std::vector<std::uint32_t>{1, 2, 3});
}
