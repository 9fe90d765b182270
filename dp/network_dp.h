// Pairwise network DP of gossip (D-PSGD): what a curious peer v can learn about the data of a
// peer u from the models v receives, as a function of the mixing matrix W. After Cyffers and
// Bellet 2022 ("Privacy amplification by decentralization") and Cyffers, Even, Bellet, Massoulie
// 2022 ("Muffliato"); the bound and its derivation are in docs/GOSSIP.md, "What a curious
// neighbour learns".
//
// The bound. u adds N(0, sigma^2 C^2) to its clipped sum (Release::own). For a peer v that u does
// not send to (W_vu = 0, v != u), v's view is a post-processing of T independent
// Poisson-subsampled Gaussian mechanisms with the larger multiplier
//   sigma_eff(u, v) = sigma * sqrt(1 + 1 / c(u, v)),
// where c(u, v) is the cost of an "absorption plan": with H = every peer except v and the peers
// v receives from, the unit of u's gradient spreads through H by W_HH; a fraction gamma of what
// sits at each hidden peer w != u each round is explained by w's own noise (A_w in total), and
// what leaves H is masked by the noise of the peer it reaches (E_b in total);
//   c = sum_w A_w^2 + sum_b E_b^2, minimised over gamma in {0, 1/32, ..., 1}.
// So eps(u, v) = the accountant's epsilon of (q, sigma_eff, steps), never above the local
// epsilon of (q, sigma, steps); for v a neighbour that u sends to (W_vu > 0), and for v = u, it is
// the local epsilon.
//
// Assumptions (docs/GOSSIP.md): one fixed W (a time-varying period is refused); honest-but-curious
// peers, no collusion; v sees exactly the models its in-neighbours send it; constant learning
// rate, weight decay 0, heavy-ball momentum (any), no Nesterov; and the linear model of the
// papers: every clipped gradient sum but the target example's contribution is known to v and
// does not depend on models v cannot see. For non-convex training on a worst-case data set the
// last assumption can fail (a peer's gradient may relay what its model holds), and then only the
// local epsilon is guaranteed. The metrics all-reduces of a gossip run and the released model are
// outside v's view here.
//
// Pure: no I/O, no threads. Bad arguments throw dpg::Error(invalid_argument) naming the argument.
#pragma once

#include <span>
#include <vector>

#include "dp/accountant.h"

namespace dpg::dp {

// The most peers pairwise_epsilons takes: the work grows as 33 n^4.
inline constexpr int kNetworkDpMaxPeers = 128;

// Hops for u's model to reach v (d[u * n + v]): 0 on the diagonal, 1 when W_vu > 0, and so on
// along the directed graph of W (j -> i when W_ij > 0). -1 when v is unreachable.
std::vector<int> graph_distances(std::span<const double> w, int peers);

// The cost c(u, v) of the absorption plan above, c[u * n + v]: +inf for v = u and for every v
// that u sends to (no amplification), else in (0, +inf).
std::vector<double> absorption_costs(std::span<const double> w, int peers);

// sigma_eff(u, v) = sigma * sqrt(1 + 1 / c(u, v)) for every pair, row-major; sigma on the
// diagonal and for neighbours.
std::vector<double> pairwise_noise_multipliers(std::span<const double> w, int peers, double sigma);

// eps[u * n + v]: epsilon at `delta` of u's data in the messages peer v receives after `steps`
// steps at Poisson rate q with noise multiplier sigma, by the `kind` accountant; each entry is
// min(local epsilon, epsilon at sigma_eff) with sigma_eff rounded down to 5 significant digits.
//   w: the mixing matrix, peers x peers, row-major (x_i <- sum_j W_ij x_j), doubly stochastic
//   within 1e-6, non-negative, strongly connected; peers in [1, kNetworkDpMaxPeers].
//   q in (0, 1], sigma > 0, steps >= 0, delta in (0, 1).
std::vector<double> pairwise_epsilons(std::span<const double> w, int peers, double q,
                                      double sigma, long long steps, double delta,
                                      AccountantKind kind = AccountantKind::pld);

// The pairs (u, v), u != v, at each graph distance d >= 1 (rows[d - 1]; a distance no pair has
// gets pairs 0): how many, the least sigma_eff among them and so the worst epsilon at that
// distance, as pairwise_epsilons gives it.
struct DistanceRow {
  int distance = 0;
  int pairs = 0;
  double least_sigma = 0;
  double worst_epsilon = 0;
};
//   distance, sigma_eff: graph_distances' and pairwise_noise_multipliers' n x n results; q, sigma,
//   steps, delta and kind as for pairwise_epsilons. One accountant run per distance.
std::vector<DistanceRow> rows_by_distance(std::span<const int> distance,
                                          std::span<const double> sigma_eff, int peers, double q,
                                          double sigma, long long steps, double delta,
                                          AccountantKind kind = AccountantKind::pld);

// The epsilon pairwise_epsilons gives a pair whose multiplier is sigma_eff: the local epsilon
// when sigma_eff == sigma, else min(local, epsilon at sigma_eff rounded down to 5 significant
// digits).
double pair_epsilon(double q, double sigma, double sigma_eff, long long steps, double delta,
                    AccountantKind kind = AccountantKind::pld);

}  // namespace dpg::dp
