#include "dp/pld.h"

#include <fftw3.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dp/checks.h"
#include "dp/pld_step.h"
#include "runtime/core/dynlib.h"

namespace dpg::dp {
namespace {

using pld_detail::Direction;
using pld_detail::GridPmf;
using pld_detail::StepLoss;
constexpr double kInf = std::numeric_limits<double>::infinity();

using checks::bad_argument;
using checks::str;

// Validates the arguments and keeps the segments with q > 0, merged by (q, sigma): composition
// is commutative, so each distinct mechanism is transformed once.
std::vector<PoissonGaussian> groups_of(std::span<const PoissonGaussian> history,
                                       const PldOptions& o) {
  if (!(o.interval > 0 && std::isfinite(o.interval)))
    bad_argument("interval must be finite and > 0, got " + str(o.interval));
  if (!(o.tail_mass > 0 && o.tail_mass < 1e-3))
    bad_argument("tail_mass must be in (0, 1e-3), got " + str(o.tail_mass));
  if (o.max_points < 16) bad_argument("max_points must be >= 16");
  std::vector<PoissonGaussian> groups;
  long long total = 0;
  for (const PoissonGaussian& s : history) {
    checks::check_q(s.q, "q");
    checks::check_sigma(s.sigma, "sigma");
    checks::check_steps(s.steps, "steps");
    if (s.q == 0 || s.steps == 0) continue;
    if (s.steps > kPldMaxSteps - total)
      bad_argument("steps: the PLD accountant composes at most " + std::to_string(kPldMaxSteps) +
                   " steps (its FFT powers lose precision beyond); use the RDP accountant");
    total += s.steps;
    auto same = std::find_if(groups.begin(), groups.end(), [&](const PoissonGaussian& g) {
      return g.q == s.q && g.sigma == s.sigma;
    });
    if (same != groups.end()) same->steps += s.steps;
    else groups.push_back(s);
  }
  return groups;
}

// FFTW is loaded at the first transform, not linked (runtime/core/dynlib.h): only a process
// that accounts privacy composes distributions, and both libraries (double and long double) were
// mapped and relocated at every start of every other one.
struct Fftw {
  decltype(&fftw_malloc) malloc;
  decltype(&fftw_free) free;
  decltype(&fftw_destroy_plan) destroy_plan;
  decltype(&fftwl_destroy_plan) destroy_plan_long;
  decltype(&fftw_plan_dft_r2c_1d) plan_r2c;
  decltype(&fftw_plan_dft_c2r_1d) plan_c2r;
  decltype(&fftwl_plan_dft_r2c_1d) plan_r2c_long;
  decltype(&fftw_execute_dft_r2c) execute_r2c;
  decltype(&fftwl_execute_dft_r2c) execute_r2c_long;
  decltype(&fftw_execute_dft_c2r) execute_c2r;
};
const Fftw& fftw() {
  static const Fftw f = [] {
    constexpr const char* kDouble = "libfftw3.so.3";
    constexpr const char* kLong = "libfftw3l.so.3";
    void* d = open_library(kDouble, "libfftw3-double3");
    void* l = open_library(kLong, "libfftw3-long3");
    Fftw out{};
    const auto get = [](auto& field, void* lib, const char* soname, const char* name) {
      field = library_function<std::remove_reference_t<decltype(field)>>(lib, soname, name);
    };
    get(out.malloc, d, kDouble, "fftw_malloc");
    get(out.free, d, kDouble, "fftw_free");
    get(out.destroy_plan, d, kDouble, "fftw_destroy_plan");
    get(out.destroy_plan_long, l, kLong, "fftwl_destroy_plan");
    get(out.plan_r2c, d, kDouble, "fftw_plan_dft_r2c_1d");
    get(out.plan_c2r, d, kDouble, "fftw_plan_dft_c2r_1d");
    get(out.plan_r2c_long, l, kLong, "fftwl_plan_dft_r2c_1d");
    get(out.execute_r2c, d, kDouble, "fftw_execute_dft_r2c");
    get(out.execute_r2c_long, l, kLong, "fftwl_execute_dft_r2c");
    get(out.execute_c2r, d, kDouble, "fftw_execute_dft_c2r");
    return out;
  }();
  return f;
}

// The transform length for n points: the smallest 2^k or 3 * 2^k >= n, so that a handful of
// lengths serve every call and their plans can be kept (planning costs ten transforms).
std::size_t fft_length(std::size_t n) {
  std::size_t m = 4;
  while (m < n) m *= 2;
  return 3 * (m / 4) >= n ? 3 * (m / 4) : m;
}

// Buffers from fftw_malloc: aligned as FFTW's plans expect, so one plan serves any of them.
template <class T> struct FftwBuffer {
  explicit FftwBuffer(std::size_t n) : data(static_cast<T*>(fftw().malloc(n * sizeof(T)))), size(n) {
    if (!data) fail(Code::internal, "PLD: out of memory for " + std::to_string(n) + " points");
  }
  ~FftwBuffer() { fftw().free(data); }
  FftwBuffer(const FftwBuffer&) = delete;
  FftwBuffer& operator=(const FftwBuffer&) = delete;
  T& operator[](std::size_t i) { return data[i]; }
  T* data;
  std::size_t size;
};

// The transforms' buffers in one precision, kept by each thread for its later calls: touching
// fresh pages costs more than the transforms themselves (measured: 7 ms against 1 ms for 2^17
// points). They only grow, to at most the largest window the thread has composed (max_points),
// until pld_release_memory() hands them back.
template <class F> struct Buffers {
  std::unique_ptr<FftwBuffer<F>> real;                    // a step's PMF folded; the composition
  std::unique_ptr<FftwBuffer<std::complex<F>>> spectrum;  // its transform
  void reserve(std::size_t n) {
    if (real && real->size >= n) return;
    real.reset();  // the old buffers go before the new ones are made: never both at once
    spectrum.reset();
    real = std::make_unique<FftwBuffer<F>>(n);
    spectrum = std::make_unique<FftwBuffer<std::complex<F>>>(n / 2 + 1);
  }
};
// The composition's transform (`product`, in double for the inverse) is the double buffers'
// spectrum itself wherever that is free: with one distinct mechanism in double (the spectrum is
// raised to its power in place) and whenever the forward transforms are in long double (the
// double spectrum is not used by them). Only several mechanisms in double need a buffer of its
// own. So a thread composing one mechanism holds two arrays of the window's length, not three.
struct Workspace {
  Buffers<double> plain;
  Buffers<long double> extended;  // the forward transforms below kPldLongDoubleBelow
  std::unique_ptr<FftwBuffer<std::complex<double>>> separate;  // the product, where it must be
  std::complex<double>* product(std::size_t n, std::size_t groups, bool with_extended) {
    if (with_extended || groups == 1) return plain.spectrum->data;
    if (!separate || separate->size < n / 2 + 1) {
      separate.reset();
      separate = std::make_unique<FftwBuffer<std::complex<double>>>(n / 2 + 1);
    }
    return separate->data;
  }
  void reserve(std::size_t n, bool with_extended) {
    plain.reserve(n);
    if (with_extended) extended.reserve(n);
  }
};
// Each thread's, made at its first composition.
std::unique_ptr<Workspace>& thread_workspace() {
  thread_local std::unique_ptr<Workspace> workspace;
  return workspace;
}

// FFTW's planner is not thread-safe (executing a plan is): making and destroying plans is
// serialised by this mutex, recursive so that a plan released while it is held (an evicted
// length, below) can take it again to be destroyed.
std::recursive_mutex& planner_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

// A plan owned: destroyed, under the planner's mutex, when its last holder lets it go (an
// evicted length once no thread is transforming with it, or the table at exit), so that what
// FFTW allocated for it is returned (LeakSanitizer, tests/sanitize/run.sh, counts an undestroyed
// plan as a leak).
struct DestroyPlan {
  void operator()(fftw_plan p) const {
    std::lock_guard lock(planner_mutex());
    fftw().destroy_plan(p);
  }
  void operator()(fftwl_plan p) const {
    std::lock_guard lock(planner_mutex());
    fftw().destroy_plan_long(p);
  }
};
using Plan = std::unique_ptr<std::remove_pointer_t<fftw_plan>, DestroyPlan>;
using LongPlan = std::unique_ptr<std::remove_pointer_t<fftwl_plan>, DestroyPlan>;

// The plans of one length: the inverse and the forward transform in double, and, made when first
// asked for, the forward transform in long double (x86's 64-bit significand, 2^11 finer than
// double's). A forward transform's rounding, about 1e-16 of a bin in double, is raised to the
// number of steps with the bin and so grows to steps * 1e-16 relative, which decided epsilon at
// small deltas (pld.h, kPldLongDoubleBelow); the inverse amplifies nothing.
struct Transforms {
  Plan forward;           // real n -> complex n/2 + 1
  Plan inverse;           // complex n/2 + 1 -> real n (unnormalised; destroys its input)
  LongPlan forward_long;  // real n -> complex n/2 + 1 in long double, or null until asked for
};

// How many transform lengths keep their plans. A plan holds FFTW's twiddle factors, memory of
// the order of the transforms' buffers at its length, and making one costs several transforms.
// A run's reports ask for two lengths at a time (the two directions; four where the messages'
// account differs) whose windows grow slowly with the steps, so the lengths used most recently
// are the ones asked for next; the earlier, shorter ones (and a calibration's trials) would
// otherwise be kept for the process's life, a length per step of the window's growth.
constexpr std::size_t kPlannedLengths = 4;

// The plans for length n, made when first asked for (again after an eviction) and shared with
// the callers that hold them: the least recently used of more than kPlannedLengths lengths is
// dropped from the table, and destroyed once no thread is transforming with it.
struct PlanEntry {
  std::size_t n;
  std::shared_ptr<Transforms> plans;
};
// The table of plans, most recently used first. The mutex is made before the table, so that it
// outlives the table's destruction at exit (which destroys the plans under it).
std::vector<PlanEntry>& plan_table() {
  planner_mutex();
  static std::vector<PlanEntry> table;
  return table;
}

std::shared_ptr<Transforms> transforms(std::size_t n, bool with_long) {
  std::vector<PlanEntry>& table = plan_table();
  std::lock_guard lock(planner_mutex());
  const int len = static_cast<int>(n);
  auto it = std::find_if(table.begin(), table.end(), [n](const PlanEntry& e) { return e.n == n; });
  if (it != table.end()) {
    std::rotate(table.begin(), it, it + 1);
  } else {
    FftwBuffer<double> real(n);
    FftwBuffer<fftw_complex> spectrum(n / 2 + 1);
    auto t = std::make_shared<Transforms>();
    t->forward = Plan(fftw().plan_r2c(len, real.data, spectrum.data, FFTW_ESTIMATE));
    t->inverse = Plan(fftw().plan_c2r(len, spectrum.data, real.data, FFTW_ESTIMATE));
    if (!t->forward || !t->inverse)
      fail(Code::internal, "FFTW could not plan a transform of length " + std::to_string(n));
    table.insert(table.begin(), PlanEntry{n, std::move(t)});
    if (table.size() > kPlannedLengths) table.pop_back();
  }
  Transforms& t = *table.front().plans;
  if (with_long && !t.forward_long) {
    FftwBuffer<long double> real(n);
    FftwBuffer<fftwl_complex> spectrum(n / 2 + 1);
    t.forward_long = LongPlan(fftw().plan_r2c_long(len, real.data, spectrum.data, FFTW_ESTIMATE));
    if (!t.forward_long)
      fail(Code::internal, "FFTW could not plan a long double transform of length " +
                               std::to_string(n));
  }
  return table.front().plans;
}

void forward(const Transforms& t, double* in, std::complex<double>* out) {
  fftw().execute_r2c(t.forward.get(), in, reinterpret_cast<fftw_complex*>(out));
}
void forward(const Transforms& t, long double* in, std::complex<long double>* out) {
  fftw().execute_r2c_long(t.forward_long.get(), in, reinterpret_cast<fftwl_complex*>(out));
}

// z^n by squaring, with the plain product (std::complex's operator* also handles inf and NaN,
// through a library call per product, which costs more than the whole transform here).
template <class F> std::complex<F> power(std::complex<F> z, long long n) {
  const auto mul = [](std::complex<F> a, std::complex<F> b) {
    return std::complex<F>(a.real() * b.real() - a.imag() * b.imag(),
                           a.real() * b.imag() + a.imag() * b.real());
  };
  std::complex<F> r = 1;
  while (n > 0) {
    if (n & 1) r = mul(r, z);
    z = mul(z, z);
    n >>= 1;
  }
  return r;
}

// One direction's composed PMF on the grid (probability probs[i] at loss (offset + i) *
// interval, plus `infinity` at +inf), and the interval it was computed at. The probabilities lie
// in the thread's workspace, where the inverse transform left them: valid until the thread's
// next composition.
struct Composed {
  long long offset = 0;
  std::span<const double> probs;
  double infinity = 0;
  double interval = 0;
};

// Chernoff orders lambda = +-2^k (per unit of loss), k = kMinOrder..kMaxOrder: the best order
// for a composed PLD of spread s is about sqrt(2 log(2 / tail_mass)) / s, and s runs from 1e-3
// (one step of little loss) to 1e3 (epsilon in the thousands).
constexpr int kMinOrder = -24;
constexpr int kMaxOrder = 12;
constexpr std::size_t kOrders = 2 * (kMaxOrder - kMinOrder + 1);

double order(std::size_t j) {  // lambda of entry j: +2^k for even j, -2^k for odd j
  const double magnitude = std::ldexp(1.0, kMinOrder + static_cast<int>(j / 2));
  return j % 2 == 0 ? magnitude : -magnitude;
}

// One step's PMF with its log moment generating function at the orders:
// log M(lambda) = log sum_i p_i e^{lambda h i}, summed from the end the weights decay towards,
// so that nothing overflows however long the PMF.
struct StepPmf {
  GridPmf pmf;
  std::array<double, kOrders> log_mgf;
};

// Half the orders: those of one sign, entry 2k + (sign < 0) of log_mgf.
constexpr std::size_t kSigned = kOrders / 2;
using pld_detail::DecaySums;
using pld_detail::decayed_sums;
static_assert(kSigned == pld_detail::kDecays);

StepPmf make_step_pmf(const StepLoss& loss, bool pessimistic, double interval) {
  StepPmf s{pessimistic ? loss.pessimistic(interval) : loss.optimistic(interval), {}};
  const std::vector<double>& p = s.pmf.probs;
  const double last = static_cast<double>(p.size() - 1);
  DecaySums decay;  // per grid index, the same for +2^k and -2^k
  for (std::size_t k = 0; k < kSigned; ++k) decay[k] = std::exp(-std::fabs(order(2 * k) * interval));
  // t > 0 is summed from the last point, t < 0 from the first: towards where the weights decay.
  const DecaySums up = decayed_sums(p, decay, false);
  const DecaySums down = decayed_sums(p, decay, true);
  for (std::size_t k = 0; k < kSigned; ++k) {
    s.log_mgf[2 * k] = order(2 * k) * interval * last + std::log(up[k]);
    s.log_mgf[2 * k + 1] = std::log(down[k]);
  }
  return s;
}

// The one-step PMFs a thread made last, reused: a training run asks for the same two or four
// after every epoch, and building one is half the cost of an evaluation. The cache only saves
// work: an entry is exactly what make_step_pmf would return again.
struct CachedPmf {
  double q, sigma, interval;
  Direction dir;
  bool pessimistic;
  std::shared_ptr<const StepPmf> pmf;
};
std::vector<CachedPmf>& thread_pmfs() {
  thread_local std::vector<CachedPmf> cache;
  return cache;
}

std::shared_ptr<const StepPmf> step_pmf(const PoissonGaussian& g, Direction dir, bool pessimistic,
                                        double interval) {
  // At most four entries (a report's two directions for the data and two for the messages) and
  // 2^20 points in all (8 MiB): a pathological sigma's PMF of up to max_points is used and
  // dropped rather than kept, and a calibration's trial sigmas, each used once, hold no more
  // than that (eight entries held 8 MiB at rank 0's peak: docs/BENCHMARKS.md, "A peer's
  // memory").
  constexpr std::size_t kEntries = 4;
  constexpr std::size_t kPoints = std::size_t{1} << 20;
  std::vector<CachedPmf>& cache = thread_pmfs();
  for (std::size_t i = 0; i < cache.size(); ++i) {
    const CachedPmf& e = cache[i];
    if (e.q == g.q && e.sigma == g.sigma && e.interval == interval && e.dir == dir &&
        e.pessimistic == pessimistic) {
      std::rotate(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(i),
                  cache.begin() + static_cast<std::ptrdiff_t>(i) + 1);  // most recent first
      return cache.front().pmf;
    }
  }
  auto made = std::make_shared<const StepPmf>(
      make_step_pmf(StepLoss(g.q, g.sigma, dir), pessimistic, interval));
  cache.insert(cache.begin(), CachedPmf{g.q, g.sigma, interval, dir, pessimistic, made});
  std::size_t points = 0;
  for (std::size_t i = 0; i < cache.size(); ++i) {
    points += cache[i].pmf->pmf.probs.size();
    if (i >= kEntries || points > kPoints) {
      cache.resize(i);
      break;
    }
  }
  return made;
}

struct Window {
  double lower, upper;  // summed in-PMF indices; outside, at most tail_mass / 2 on each side
};

// Chernoff: P(S >= u) <= E[e^{tS}] e^{-tu} for t > 0 (and the mirror for t < 0), where S is the
// sum of the steps' grid indices and log E[e^{tS}] = sum over groups of steps * log M(t).
Window chernoff_window(const std::vector<std::shared_ptr<const StepPmf>>& pmfs,
                       const std::vector<long long>& steps, double interval, double tail_mass) {
  double top = 0;  // the largest possible sum
  for (std::size_t g = 0; g < pmfs.size(); ++g)
    top += static_cast<double>(steps[g]) * static_cast<double>(pmfs[g]->pmf.probs.size() - 1);
  Window w{0, top};
  const double log_tail = std::log(2.0 / tail_mass);
  for (std::size_t j = 0; j < kOrders; ++j) {
    double cumulant = 0;
    for (std::size_t g = 0; g < pmfs.size(); ++g)
      cumulant += static_cast<double>(steps[g]) * pmfs[g]->log_mgf[j];
    const double t = order(j) * interval;
    const double bound = (cumulant + log_tail) / t;
    if (!std::isfinite(bound)) continue;
    if (t > 0) w.upper = std::min(w.upper, std::ceil(bound));
    else w.lower = std::max(w.lower, std::floor(bound));
  }
  w.lower = std::min(w.lower, w.upper);
  return w;
}

// Multiplies `product` by the transform of `pmf` raised to `steps`, both taken in F; the first
// group's power is written into `product` instead (what a product of ones times it gives), which
// lets `product` be the spectrum itself.
template <class F>
void multiply_power(const Transforms& plan, Buffers<F>& b, std::size_t n, const GridPmf& pmf,
                    long long steps, bool first, std::complex<double>* product) {
  F* folded = b.real->data;
  std::complex<F>* spectrum = b.spectrum->data;
  // Fold the PMF modulo n: the transform is circular, so this changes nothing that the circular
  // convolution would not fold anyway.
  std::fill(folded, folded + n, F(0));
  for (std::size_t i = 0; i < pmf.probs.size(); ++i) folded[i % n] += pmf.probs[i];
  forward(plan, folded, spectrum);
  // A bin whose power underflows (|z|^steps < e^-745) is 0: with a window of some 16 standard
  // deviations of the composed loss, all but the lowest hundred or so frequencies are, so this
  // check saves most of the squarings.
  const F negligible = std::exp(F(-2 * 745.0) / static_cast<F>(steps));
  for (std::size_t k = 0; k < n / 2 + 1; ++k) {
    if (!first && product[k] == 0.0) continue;
    if (std::norm(spectrum[k]) < negligible) {
      product[k] = 0.0;
      continue;
    }
    const std::complex<F> pf = power(spectrum[k], steps);
    const std::complex<double> p(static_cast<double>(pf.real()), static_cast<double>(pf.imag()));
    if (first) {
      product[k] = p;
      continue;
    }
    product[k] = {product[k].real() * p.real() - product[k].imag() * p.imag(),
                  product[k].real() * p.imag() + product[k].imag() * p.real()};
  }
}

// The pmfs of `groups` composed, each `steps` times, at `interval`, their forward transforms in
// long double when `extended`, into `out`; false when the window would exceed max_points (the
// caller coarsens).
bool compose(const std::vector<std::shared_ptr<const StepPmf>>& steps_pmfs,
             const std::vector<long long>& steps, double interval, const PldOptions& o,
             bool pessimistic, bool extended, double* window_points, Composed& out) {
  const Window w = chernoff_window(steps_pmfs, steps, interval, o.tail_mass);
  *window_points = w.upper - w.lower + 1;
  if (*window_points > static_cast<double>(o.max_points)) return false;
  const std::size_t width = static_cast<std::size_t>(*window_points);
  const std::size_t n = fft_length(width);
  const std::shared_ptr<Transforms> held_plans = transforms(n, extended);
  const Transforms& plan = *held_plans;
  std::unique_ptr<Workspace>& held = thread_workspace();
  if (!held) held = std::make_unique<Workspace>();
  Workspace& workspace = *held;
  workspace.reserve(n, extended);
  std::complex<double>* product = workspace.product(n, steps_pmfs.size(), extended);
  double log_no_infinity = 0;  // log P(no step's loss is +inf)
  long long offset = 0;
  for (std::size_t g = 0; g < steps_pmfs.size(); ++g) {
    const GridPmf& pmf = steps_pmfs[g]->pmf;
    if (extended) multiply_power(plan, workspace.extended, n, pmf, steps[g], g == 0, product);
    else multiply_power(plan, workspace.plain, n, pmf, steps[g], g == 0, product);
    log_no_infinity += static_cast<double>(steps[g]) * std::log1p(-pmf.infinity);
    offset += steps[g] * pmf.offset;
  }
  double* real = workspace.plain.real->data;
  fftw().execute_c2r(plan.inverse.get(), reinterpret_cast<fftw_complex*>(product), real);
  // Sums outside the window fold into it (at most tail_mass in all); take the window, in place:
  // turned so that it starts at the buffer's start (the window's lower end, modulo n), then
  // scaled.
  const long long lower = static_cast<long long>(w.lower);
  out.offset = offset + lower;
  std::rotate(real, real + static_cast<std::size_t>(lower) % n, real + n);
  const double scale = 1.0 / static_cast<double>(n);
  double total = 0;
  for (std::size_t j = 0; j < width; ++j) {
    total += real[j];
    real[j] = std::max(real[j] * scale, 0.0);  // FFT rounding leaves about -1e-17
  }
  out.probs = std::span<const double>(real, width);
  out.infinity = -std::expm1(log_no_infinity) + (pessimistic ? o.tail_mass : 0.0);
  out.interval = interval;
  // A NaN anywhere in a step's PMF spreads to every point through the transforms, and then every
  // comparison in epsilon_of is false: it would report epsilon 0. Never silently.
  if (!std::isfinite(total) || !std::isfinite(out.infinity)) {
    fail(Code::internal, "PLD: the composed distribution is not finite (interval " +
                             str(interval) + "); please report the history that gave it");
  }
  return true;
}

// One direction of `groups` composed, at the options' interval or the smallest power-of-two
// multiple of it at which every PMF and the window fit in max_points.
Composed compose_direction(const std::vector<PoissonGaussian>& groups, Direction dir,
                           bool pessimistic, bool extended, const PldOptions& o) {
  std::vector<long long> steps;
  for (const PoissonGaussian& g : groups) steps.push_back(g.steps);
  // For q = 1 the two directions' PLDs coincide (the pair is mirrored); remove's is used.
  const auto dir_of = [&](const PoissonGaussian& g) {
    return g.q == 1.0 ? Direction::remove : dir;
  };
  // A sigma so small that one step's loss overflows a double (sigma below about 1e-154, where
  // sigma^2 underflows) has no grid: the mechanism is deterministic to double precision, so all
  // its mass is put at loss +inf (epsilon +inf, delta 1), as the RDP accountant reports it.
  for (const PoissonGaussian& g : groups) {
    const StepLoss loss(g.q, g.sigma, dir_of(g));
    if (!std::isfinite(loss.loss_at_lower_x()) || !std::isfinite(loss.loss_at_upper_x())) {
      Composed all_infinite;
      all_infinite.infinity = 1.0;
      all_infinite.interval = o.interval;
      return all_infinite;
    }
  }
  // Each pass at least doubles the interval, so this ends (a finite interval fits any finite
  // loss range in two points).
  for (double interval = o.interval; std::isfinite(interval);) {
    bool fits = true;
    for (const PoissonGaussian& g : groups)
      fits = fits && StepLoss(g.q, g.sigma, dir_of(g)).grid_points(interval) <=
                         static_cast<double>(o.max_points);
    if (!fits) {
      interval *= 2;
      continue;
    }
    std::vector<std::shared_ptr<const StepPmf>> pmfs;
    for (const PoissonGaussian& g : groups)
      pmfs.push_back(step_pmf(g, dir_of(g), pessimistic, interval));
    double window = 0;
    Composed c;
    if (compose(pmfs, steps, interval, o, pessimistic, extended, &window, c)) return c;
    // The window scales as 1 / interval: coarsen by the power of two that brings it under.
    interval *= std::exp2(std::ceil(std::log2(window / static_cast<double>(o.max_points))));
  }
  fail(Code::internal, "PLD: no grid interval fits the composition in max_points");
}

// Smallest eps >= 0 with delta(eps) <= delta, where for eps between grid losses
//   delta(eps) = infinity + sum_{l_j > eps} p_j (1 - e^{eps - l_j})
// is A - e^{eps - r} B with A the mass above eps and B = sum p_j e^{r - l_j} kept relative to
// the lowest included loss r (so that nothing overflows for losses in the thousands).
double epsilon_of(const Composed& f, double delta) {
  if (f.infinity > delta) return kInf;
  const double h = f.interval;
  double mass = f.infinity, weighted = 0;
  for (std::size_t j = f.probs.size(); j-- > 0;) {
    const double loss = static_cast<double>(f.offset + static_cast<long long>(j)) * h;
    if (loss <= 0) break;  // only losses above eps >= 0 count
    mass += f.probs[j];
    weighted = weighted * std::exp(-h) + f.probs[j];  // now relative to r = loss
    // On [lo, loss], delta(eps) = mass - e^{eps - loss} weighted.
    const double lo = j == 0 ? 0.0 : std::max(loss - h, 0.0);
    if (mass - std::exp(lo - loss) * weighted > delta)
      return loss + std::log((mass - delta) / weighted);
  }
  return 0.0;
}

double delta_of(const Composed& c, double eps) {
  double d = c.infinity;
  for (std::size_t j = 0; j < c.probs.size(); ++j) {
    const double loss = static_cast<double>(c.offset + static_cast<long long>(j)) * c.interval;
    if (loss > eps) d += c.probs[j] * -std::expm1(eps - loss);
  }
  return std::min(d, 1.0);
}

// Both directions (one when every q is 1), each evaluated by `value`, the larger kept; the
// forward transforms in long double when `extended`.
template <class F>
PldResult worst_direction(std::span<const PoissonGaussian> history, PldEstimate estimate,
                          bool extended, const PldOptions& o, F value) {
  const std::vector<PoissonGaussian> groups = groups_of(history, o);
  PldResult r{0.0, o.interval};
  if (groups.empty()) return r;
  const bool pessimistic = estimate == PldEstimate::pessimistic;
  const bool all_full = std::all_of(groups.begin(), groups.end(),
                                    [](const PoissonGaussian& g) { return g.q == 1.0; });
  bool first = true;
  for (Direction dir : {Direction::remove, Direction::add}) {
    if (dir == Direction::add && all_full) break;
    const Composed c = compose_direction(groups, dir, pessimistic, extended, o);
    const double v = value(c);
    r.value = first ? v : std::max(r.value, v);
    r.interval = std::max(r.interval, c.interval);
    first = false;
  }
  return r;
}

}  // namespace

PldResult pld_epsilon(std::span<const PoissonGaussian> history, double delta, PldEstimate estimate,
                      const PldOptions& options) {
  checks::check_delta(delta, "delta");
  if (delta < kPldMinDelta) {
    bad_argument("delta: the PLD accountant is checked down to " + str(kPldMinDelta) +
                 " (below, the tail mass it leaves out weighs on delta); for delta " + str(delta) +
                 " use the RDP accountant (--accountant rdp)");
  }
  // The optimistic side asks for delta + tail_mass: the mass folded into its window may have
  // raised its delta by up to tail_mass / 2, and its epsilon must stay below the true one.
  const double target =
      estimate == PldEstimate::optimistic ? std::min(delta + options.tail_mass, 1.0) : delta;
  return worst_direction(history, estimate, delta < kPldLongDoubleBelow, options,
                         [&](const Composed& c) { return epsilon_of(c, target); });
}

PldResult pld_delta(std::span<const PoissonGaussian> history, double epsilon, PldEstimate estimate,
                    const PldOptions& options) {
  if (!std::isfinite(epsilon)) bad_argument("epsilon must be finite, got " + str(epsilon));
  const auto delta_at = [&](const Composed& c) { return delta_of(c, epsilon); };
  PldResult r = worst_direction(history, estimate, false, options, delta_at);
  // A small delta is decided by bins near the double transform's amplified rounding: again,
  // with the forward transforms in long double.
  if (r.value < kPldLongDoubleBelow) r = worst_direction(history, estimate, true, options, delta_at);
  if (estimate == PldEstimate::optimistic) r.value = std::max(r.value - options.tail_mass, 0.0);
  return r;
}

void pld_release_memory() {
  thread_workspace().reset();
  std::vector<CachedPmf>().swap(thread_pmfs());
  std::vector<PlanEntry> dropped;  // destroyed after the lock, each plan once no thread uses it
  {
    std::lock_guard lock(planner_mutex());
    dropped.swap(plan_table());
  }
}

}  // namespace dpg::dp
