// The Skellam mechanism, for secure aggregation: integer noise whose sum over peers is exactly the
// central noise, so that N peers each adding Sk(mu / N) to their integer (fixed-point) update give
// the aggregate Sk(mu), which the accountant below prices. See docs/PRIVACY.md.
//
// Sk(mu) here is Poisson(mu) - Poisson(mu): mean 0, variance 2 mu. Sums of independent Skellams
// are Skellam (Sk(a) + Sk(b) = Sk(a + b)), which is what makes the noise divisible among peers,
// and the noise is an integer, so it goes through the modular arithmetic of secure aggregation
// without rounding: no floating-point value ever reaches the released sum.
//
// Sampling (add_skellam). The uniforms are ChaCha20's keystream (OpenSSL's libcrypto) under a
// dp::NoiseKey, counter-based so that noising a buffer range by range gives bit for bit what
// noising it whole gives (dp/value_stream.h lays it out):
// - value x (= first + i) owns ChaCha20 block x (8 words of 64 bits) under the nonce (stream,
//   tag 1); the discrete Gaussian uses tags 4 to 6, so the same (key, stream) never yields the
//   same keystream to both;
// - should the two Poisson draws of value x need more than those 8 words (rejection sampling:
//   0.5% of values at large mu, 5% at mu = 10, none below 10), they go on in a sub-stream of
//   their own: ChaCha20 under the sub-key K' (the first 32 bytes of ChaCha20(key, nonce (stream,
//   tag 2))) with the nonce (x, tag 3), blocks 0, 1, 2, ... So the draw of x depends on (key,
//   stream, x) and nothing else.
// Each Poisson draw takes 53-bit uniforms ((w >> 11) + 1/2) 2^-53, in (0, 1):
// - mu < 10: inversion, one uniform, by the sequential search of the CDF from 0 (the CDF summed
//   in double: each probability is off by at most a few ulps, 1e-16 relative);
// - mu >= 10: PTRS, Hörmann 1993 ("The transformed rejection method for generating Poisson
//   random variables", Insurance: Mathematics and Economics 12), with its constants, as numpy
//   implements it: exact, 1.12 pairs of uniforms a draw at large mu (1.33 at mu = 10), 35 ns a
//   Skellam value at mu = 1e9 including the keystream. The acceptance test compares
//   log V + log(hat) with log p(k), and log p(k) is computed as Loader 2000 ("Fast and accurate
//   computation of binomial probabilities") writes it, -stirlerr(k) - bd0(k, mu) - log(2 pi k) / 2,
//   with the deviance bd0 = k log(k / mu) + mu - k by its series near mu: the error is a few ulps
//   of O(1) quantities at any mu (checked against 50-digit arithmetic: 1e-14 absolute up to
//   mu = 1e13), where the textbook -mu + k log mu - lgamma(k + 1) would lose |k log mu| 2^-53,
//   0.03 in the log, 3% in the acceptance probability, at mu = 1e13.
// Floating-point limits: mu is capped at kMaxSkellamMu = 1e13 (the range tested; k stays an exact
// double, below 2^53, up to mu of about 4e15). The 53-bit uniforms bound how far out a draw can
// reach: inversion stops where the CDF summed in double stops growing (a tail mass of about
// 1e-16 goes to that last k), and PTRS's k(U) moves by (2a / us + b) 2^-53 per step of U, far
// below 1 at every mu here, so every integer of the body can be drawn; what the two cannot
// produce has probability below 2^-53 per draw.
//
// Accounting. skellam_rdp is the Renyi DP of the multi-dimensional Skellam mechanism of Agarwal,
// Kairouz and Liu 2021 ("The Skellam Mechanism for Differentially Private Federated Learning",
// NeurIPS 2021, arXiv:2110.04995: the RDP theorem for the multi-dimensional mechanism, cited as
// Theorem 3.5 or Corollary 3.6 depending on the version), as the authors' code computes it:
// google-research/federated, distributed_dp/accounting_utils.py, _skellam_rdp (at scale 1, the
// sensitivities already on the integer grid). There, as in tensorflow_privacy's
// DistributedSkellamSumQuery, Sk is parameterised by its variance V (each Poisson of mean V / 2):
//   eps(alpha) = alpha l2^2 / (2 V) + min(((2 alpha - 1) l2^2 + 6 l1) / (4 V^2), 3 l1 / (2 V));
// here V = 2 mu. The first term is the Gaussian mechanism's RDP at the same variance; the second
// is the price of discreteness, O(1 / mu) relative to it.
// subsampled_rdp is the general upper bound of Zhu and Wang 2019 ("Poisson Subsampled Renyi
// Differential Privacy", ICML 2019; Theorem 5 of the PMLR version as the code below numbers it)
// for a Poisson sample of rate q, valid for any mechanism:
//   eps'(alpha) <= log( (1-q)^(alpha-1) (1 + (alpha-1) q)
//                       + C(alpha, 2) q^2 (1-q)^(alpha-2) e^{eps(2)}
//                       + 3 sum_{l=3}^{alpha} C(alpha, l) q^l (1-q)^(alpha-l) e^{(l-1) eps(l)} )
//                  / (alpha - 1),
// as google-research/federated distributed_dp/accounting_utils.py (_compute_rdp_subsampled,
// upper_bound=True) computes it, then capped at eps(alpha) as that code does (sampling never
// costs privacy). The factor 3 is what "general" costs: for the Gaussian, whose exact formula is
// this one with 1, it is at most log(3) / (alpha - 1) above the exact RDP. It also leaves a floor
// that no noise removes: as eps -> 0 the sum tends to 1 + 2 P(Binomial(alpha, q) >= 3), not 1.
// Over many steps that floor, not the mechanism, sets epsilon: at q = 0.0683, 586 steps,
// delta = 1e-5 and the noise of sigma 2.46 in Gaussian terms, skellam_epsilon is 4.87 where the
// exact subsampled Gaussian's RDP gives 3.27 (the Skellam's own RDP is the Gaussian's within
// 1e-10); and epsilon 3 takes 70 times that variance.
//
// Pure apart from add_skellam's libcrypto calls: no I/O, no threads, no global mutable state. Bad
// arguments throw dpg::Error(Code::invalid_argument) naming the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "dp/rdp.h"
#include "dp/secure_noise.h"

namespace dpg::dp {

// The largest Poisson mean add_skellam (and calibrate_skellam_mu) accepts.
inline constexpr double kMaxSkellamMu = 1e13;

// out[i] += X_i modulo 2^32, X_i ~ Sk(mu) = Poisson(mu) - Poisson(mu) independent, drawn from
// ChaCha20(key) under `stream` at position first + i (the values are two's-complement integers on
// a fixed-point grid; the addition wraps). mu in [0, kMaxSkellamMu]; mu = 0 adds nothing. Throws
// invalid_argument for a bad mu or a range that ends past 2^32 values, dpg::Error(internal) if
// libcrypto fails.
void add_skellam(std::span<std::uint32_t> out, double mu, const NoiseKey& key,
                 std::uint64_t stream, std::size_t first = 0);

// RDP at order alpha (finite, > 1) of adding independent Sk(mu) (mu finite, > 0) to each
// coordinate of an integer vector with L1 sensitivity l1 and L2 sensitivity l2 (finite, >= 0).
double skellam_rdp(double alpha, double mu, double l1, double l2);

// Upper bound on the RDP at integer order alpha >= 2 of a mechanism with RDP curve rdp(j) (integer
// j >= 2; each value >= 0, +inf allowed) run on a Poisson sample of rate q in [0, 1], add/remove
// adjacency: min(Zhu-Wang bound, rdp(alpha)), summed in log space. q = 0 gives 0, q = 1 gives
// rdp(alpha). Calls rdp(j) for j = 2..alpha.
double subsampled_rdp(int alpha, double q, const std::function<double(int)>& rdp);

// One segment of a history of Poisson-subsampled Skellam steps (secure aggregation's account,
// dp/accountant.h): `steps` steps at rate q of Sk(mu) noise on a grid value of sensitivities l1, l2.
struct PoissonSkellam {
  double q;
  double mu;
  double l1;
  double l2;
  long long steps;
  bool operator==(const PoissonSkellam&) const = default;
};

// Epsilon at `delta` of a history: the segments' RDP curves (as below) summed order by order, then
// converted. An empty history, or one of q = 0 only, gives epsilon 0 (best_alpha NaN).
PrivacySpent skellam_epsilon(std::span<const PoissonSkellam> history, double delta);

// Epsilon at `delta` after `steps` (>= 0) Poisson-subsampled (rate q) Skellam steps: steps times
// subsampled_rdp at the integer orders 2..256 and 288, 320, 384, 448, 512, 768, 1024, converted
// by rdp_to_epsilon. steps = 0 or q = 0 gives epsilon 0 (best_alpha NaN).
PrivacySpent skellam_epsilon(double q, double mu, double l1, double l2, long long steps,
                             double delta);

// The smallest mu whose skellam_epsilon after `steps` (>= 1) at `delta` is <= target_epsilon, by
// bisection until the bracket is narrower than 1e-4 of its upper end; returns the upper end, so
// that skellam_epsilon(q, result, ...) <= target_epsilon holds. q in (0, 1]; l1, l2 > 0. Throws
// invalid_argument when no mu up to kMaxSkellamMu meets the target.
double calibrate_skellam_mu(double q, long long steps, double delta, double target_epsilon,
                            double l1, double l2);

}  // namespace dpg::dp
