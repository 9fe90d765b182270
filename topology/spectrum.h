// How fast gossip on W forgets disagreement: the norm of W - J/n on the space orthogonal to the
// all-ones vector (J is the all-ones matrix, so J/n is exact averaging).
#pragma once

#include <vector>

#include "topology/topology.h"

namespace dpg::topology {

struct Spectrum {
  // ||W - J/n||_2. For a symmetric W: the second-largest eigenvalue modulus (LAPACKE_dsyev);
  // otherwise the largest singular value (LAPACKE_dgesvd).
  double rho = 0;
  double spectral_gap = 0;  // 1 - rho
  // Rounds of plain gossip that shrink the disagreement ||x - mean|| at least 1000x:
  // ceil(ln 1000 / -ln rho); 1 when rho < 1e-12 (exact averaging in one round); +infinity when
  // rho >= 1 - 1e-15 (gossip never converges).
  double rounds_1000x = 0;
};

Spectrum analyse(const Topology& w);

// A time-varying period applied as W_{p-1} ... W_1 W_0: rho and spectral_gap of that product;
// rounds_1000x is counted in rounds, p * ceil(ln 1000 / -ln rho_product), or exactly p when the
// product equals J/n within 1e-12 in every entry. A period of one matrix is analyse(period[0]).
Spectrum analyse_period(const std::vector<Topology>& period);

// The product W_{p-1} ... W_1 W_0 of a period, row-major n x n.
std::vector<double> period_product(const std::vector<Topology>& period);

}  // namespace dpg::topology
