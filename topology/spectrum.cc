#include "topology/spectrum.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/core/blas.h"
#include "runtime/core/dynlib.h"
#include "runtime/core/error.h"

namespace dpg::topology {
namespace {

// LAPACK is loaded at the first spectrum, not linked (runtime/core/dynlib.h): most processes
// analyse no graph, and LAPACKE brings LAPACK, the reference BLAS and gfortran's runtime along.
constexpr const char* kLapacke = "liblapacke.so.3";
struct Lapacke {
  decltype(&LAPACKE_dsyev) dsyev;
  decltype(&LAPACKE_dgesvd) dgesvd;
};
const Lapacke& lapacke() {
  static const Lapacke l = [] {
    void* lib = open_library(kLapacke, "liblapacke");
    return Lapacke{library_function<decltype(&LAPACKE_dsyev)>(lib, kLapacke, "LAPACKE_dsyev"),
                   library_function<decltype(&LAPACKE_dgesvd)>(lib, kLapacke, "LAPACKE_dgesvd")};
  }();
  return l;
}

constexpr double kExact = 1e-12;       // below this rho (or entry error) averaging is exact
constexpr double kNoProgress = 1e-15;  // rho within this of 1: gossip never converges
// ln 1000 / -ln rho can land a hair above an integer through rounding (rho = 0.1 gives
// 3.0000000000000004); this slack keeps such a case at the integer.
constexpr double kCeilSlack = 1e-9;

// ||A - J/n||_2 for A (n x n, row-major), destroying `a`.
double norm_off_average(int n, std::vector<double> a) {
  const double avg = 1.0 / n;
  for (double& v : a) v -= avg;
  bool symmetric = true;
  for (int i = 0; i < n && symmetric; ++i)
    for (int j = i + 1; j < n; ++j)
      if (std::abs(a[static_cast<std::size_t>(i) * n + j] -
                   a[static_cast<std::size_t>(j) * n + i]) > kSymmetryTolerance) {
        symmetric = false;
        break;
      }
  std::vector<double> values(n);
  lapack_int info = 0;
  if (symmetric) {
    info = lapacke().dsyev(LAPACK_ROW_MAJOR, 'N', 'U', n, a.data(), n, values.data());
  } else {
    std::vector<double> superb(std::max(1, n - 1));
    info = lapacke().dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', n, n, a.data(), n, values.data(), nullptr, 1,
                          nullptr, 1, superb.data());
  }
  if (info != 0)
    fail(Code::internal, std::string(symmetric ? "LAPACKE_dsyev" : "LAPACKE_dgesvd") +
                             " failed with info " + std::to_string(info) + " on a " +
                             std::to_string(n) + " x " + std::to_string(n) + " matrix");
  double rho = 0;
  for (double v : values) rho = std::max(rho, std::abs(v));
  return rho;
}

// Rounds for one application of the (product) matrix to shrink disagreement 1000x.
double applications_1000x(double rho) {
  if (rho < kExact) return 1;
  if (rho >= 1 - kNoProgress) return std::numeric_limits<double>::infinity();
  return std::max(1.0, std::ceil(std::log(1000.0) / -std::log(rho) - kCeilSlack));
}

Spectrum from_rho(double rho) {
  Spectrum s;
  s.rho = rho;
  s.spectral_gap = 1 - rho;
  s.rounds_1000x = applications_1000x(rho);
  return s;
}

}  // namespace

Spectrum analyse(const Topology& w) { return from_rho(norm_off_average(w.peers(), w.matrix())); }

std::vector<double> period_product(const std::vector<Topology>& period) {
  if (period.empty()) fail(Code::invalid_argument, "period_product: empty period");
  const int n = period.front().peers();
  std::vector<double> product = period.front().matrix();
  std::vector<double> next(product.size());
  for (std::size_t t = 1; t < period.size(); ++t) {
    if (period[t].peers() != n)
      fail(Code::invalid_argument, "period_product: matrix " + std::to_string(t) + " has " +
                                       std::to_string(period[t].peers()) + " peers, matrix 0 has " +
                                       std::to_string(n));
    // next = W_t * product: the later round multiplies from the left.
    openblas().dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0,
                     period[t].matrix().data(), n, product.data(), n, 0.0, next.data(), n);
    product.swap(next);
  }
  return product;
}

Spectrum analyse_period(const std::vector<Topology>& period) {
  if (period.size() == 1) return analyse(period.front());
  const std::vector<double> product = period_product(period);
  const int n = period.front().peers();
  const double p = static_cast<double>(period.size());
  double max_error = 0;
  for (double v : product) max_error = std::max(max_error, std::abs(v - 1.0 / n));
  Spectrum s = from_rho(norm_off_average(n, product));
  s.rounds_1000x = max_error < kExact ? p : p * s.rounds_1000x;
  return s;
}

}  // namespace dpg::topology
