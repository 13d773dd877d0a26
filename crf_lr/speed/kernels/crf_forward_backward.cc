// The linear-chain CRF's forward-backward pass as one CPU kernel (crf_lr.fused_kernels).
//
// crf_lr/crf.py's _forward_backward is a tf.while_loop whose body runs about 90 ops per position,
// and with its surroundings some 400 ops that every training step's trace builds, grappler
// optimises and the executor schedules. This kernel computes the same outputs, in float64, one
// example per work unit:
//
//   CrfLrForwardBackward(emissions (B, n, L), labels (B, n, L), mask (B, n), transitions (L, L),
//                        start (L), end (L); floor)
//     -> objective (B,) = score(labels) - log Z, d_emissions (B, n, L), d_start (B, L),
//        d_end (B, L), and the factors of the transitions' gradient, time-major:
//        labels (n, B, L) (masked), alphas (n, B, L), following (n, B, L), exp_trans (L, L)
//
// with _forward_backward's arithmetic: emissions floored at `floor` (DISALLOWED_SCORE) where the
// mask is set and 0 elsewhere, taken relative to each position's peak; exponent space with the
// forward and backward vectors renormalised at every position; sums that underflow to 0 divide
// by 1; log of the final sum floored at 1e-300 (crf.py's _TINY). Masks are read position by
// position, as the ops do (crf.py checks that they are left-aligned).
//
// Built against the installed TensorFlow by crf_lr/native_build.py, with fused_ops.cc.
#define EIGEN_USE_THREADS
#include <algorithm>
#include <cmath>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace crf_lr {
namespace tf = ::tensorflow;

constexpr double kTiny = 1e-300;   // crf.py's _TINY

REGISTER_OP("CrfLrForwardBackward")
    .Input("emissions: T")
    .Input("labels: T")
    .Input("mask: bool")
    .Input("transitions: T")
    .Input("start: T")
    .Input("end: T")
    .Output("objective: T")
    .Output("d_emissions: T")
    .Output("d_start: T")
    .Output("d_end: T")
    .Output("labels_time_major: T")
    .Output("alphas: T")
    .Output("following: T")
    .Output("exp_trans: T")
    .Attr("floor: float")
    .Attr("T: {float, double}")
    .SetShapeFn([](tf::shape_inference::InferenceContext* c) {
      using tf::shape_inference::DimensionHandle;
      using tf::shape_inference::ShapeHandle;
      ShapeHandle emissions, labels_shape, mask_shape;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &emissions));
      TF_RETURN_IF_ERROR(c->Merge(emissions, c->input(1), &labels_shape));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &mask_shape));
      DimensionHandle batch = c->Dim(emissions, 0), n = c->Dim(emissions, 1),
                      labels = c->Dim(emissions, 2);
      c->set_output(0, c->Vector(batch));
      c->set_output(1, emissions);
      c->set_output(2, c->Matrix(batch, labels));
      c->set_output(3, c->Matrix(batch, labels));
      for (int i = 4; i < 7; ++i) c->set_output(i, c->MakeShape({n, batch, labels}));
      c->set_output(7, c->Matrix(labels, labels));
      return tf::OkStatus();
    });

// x where positive, else 1: a sum that underflowed to 0 (no allowed path) stays 0.
inline double SafeDivisor(double x) { return x > 0 ? x : 1.0; }

// The larger of a running maximum and x, NaN once either is NaN (as tf.reduce_max).
inline double NanMax(double peak, double x) { return std::isnan(x) || x > peak ? x : peak; }

// One example's pass. Inputs are its rows (n x L, row-major); time-major outputs are written
// at [t, b, :], i.e. with a stride of `stride` = B x L between positions.
template <typename T>
struct Example {
  int64_t n, num_labels, stride;
  double floor;
  const double *exp_trans, *exp_trans_t;           // L x L, and transposed
  const double *exp_start, *exp_end;               // L
  const double *transitions, *start, *end;         // as given, in float64
  double transitions_peak, boundary_peaks;          // max(transitions); max(start) + max(end)
  bool transitions_finite;                          // a label of weight 0 adds exactly 0

  void Run(const T* emissions, const T* labels_in, const bool* mask, T* objective,
           T* d_emissions, T* d_start, T* d_end, T* labels_out, T* alphas_out, T* following_out,
           std::vector<double>& work) const {
    const int64_t L = num_labels, size = n * L;
    *objective = static_cast<T>(0);
    std::fill(d_start, d_start + L, static_cast<T>(0));
    std::fill(d_end, d_end + L, static_cast<T>(0));
    if (n == 0) return;
    work.assign(4 * size + L + n, 0.0);
    double* scores = work.data();                 // emissions less their peak, then weights
    double* labels = scores + size;
    double* alphas = labels + size;
    double* betas = alphas + size;
    double* end_gradient = betas + size;          // L
    double* totals = end_gradient + L;            // n

    double score = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      double peak = -INFINITY;
      for (int64_t j = 0; j < L; ++j) {
        const double e = mask[t] ? std::max(static_cast<double>(emissions[t * L + j]), floor)
                                 : 0.0;
        scores[t * L + j] = e;
        peak = NanMax(peak, e);
        labels[t * L + j] = mask[t] ? static_cast<double>(labels_in[t * L + j]) : 0.0;
      }
      double mass = 0.0;
      for (int64_t j = 0; j < L; ++j) {
        scores[t * L + j] -= peak;
        mass += labels[t * L + j];
        score += labels[t * L + j] * scores[t * L + j];
      }
      score += (mass - 1.0) * peak;
    }
    // the path's transitions, first label and last label (where the mask drops, or row's end)
    for (int64_t t = 1; t < n; ++t) {
      for (int64_t i = 0; i < L; ++i) {
        const double left = labels[(t - 1) * L + i];
        if (left == 0.0 && transitions_finite) continue;   // one-hot rows: L, not L x L
        double row = 0.0;
#pragma omp simd reduction(+ : row)
        for (int64_t j = 0; j < L; ++j) row += transitions[i * L + j] * labels[t * L + j];
        score += left * row;
      }
    }
    for (int64_t j = 0; j < L; ++j) score += labels[j] * start[j];
    auto last = [&](int64_t t) { return mask[t] && !(t + 1 < n && mask[t + 1]); };
    for (int64_t t = 0; t < n; ++t) {
      if (!last(t)) continue;
      for (int64_t j = 0; j < L; ++j) score += labels[t * L + j] * end[j];
    }

    double* weights = scores;
    for (int64_t k = 0; k < size; ++k) weights[k] = std::exp(weights[k]);
    double log_z = boundary_peaks;
    for (int64_t t = 1; t < n; ++t) log_z += mask[t] ? transitions_peak : 0.0;

    // forward to position 0, backward to position n - 1
    double total = 0.0;
    for (int64_t j = 0; j < L; ++j) total += alphas[j] = exp_start[j] * weights[j];
    total = SafeDivisor(total);
    for (int64_t j = 0; j < L; ++j) alphas[j] /= total;
    log_z += std::log(total);
    totals[0] = total;
    double end_sum = 0.0;
    for (int64_t j = 0; j < L; ++j) end_sum += exp_end[j];
    for (int64_t j = 0; j < L; ++j) betas[(n - 1) * L + j] = exp_end[j] / end_sum;

    for (int64_t i = 1; i < n; ++i) {
      // alpha_i = (alpha_{i-1} exp_trans) * weights_i, renormalised where the mask is set
      const double* alpha = alphas + (i - 1) * L;
      double* moved = alphas + i * L;
      std::fill(moved, moved + L, 0.0);
      for (int64_t k = 0; k < L; ++k) {         // rows of exp_trans: contiguous, vectorised
        const double a = alpha[k];
        const double* row = exp_trans + k * L;
#pragma omp simd
        for (int64_t j = 0; j < L; ++j) moved[j] += a * row[j];
      }
      total = 0.0;
      for (int64_t j = 0; j < L; ++j) total += moved[j] *= weights[i * L + j];
      total = SafeDivisor(total);
      if (mask[i]) {
        for (int64_t j = 0; j < L; ++j) moved[j] /= total;
      } else {
        std::copy(alpha, alpha + L, moved);
        total = 1.0;
      }
      log_z += std::log(total);
      totals[i] = total;
      // beta_t = exp_trans (weights_{t+1} * beta_{t+1}), renormalised where the mask is set
      const int64_t t = n - 1 - i;
      const double* beta = betas + (t + 1) * L;
      double* back = betas + t * L;
      if (!mask[t + 1]) {
        std::copy(beta, beta + L, back);
        continue;
      }
      std::fill(back, back + L, 0.0);
      for (int64_t j = 0; j < L; ++j) {         // rows of exp_trans transposed: vectorised
        const double w = weights[(t + 1) * L + j] * beta[j];
        const double* column = exp_trans_t + j * L;
#pragma omp simd
        for (int64_t k = 0; k < L; ++k) back[k] += w * column[k];
      }
      double back_sum = 0.0;
      for (int64_t k = 0; k < L; ++k) back_sum += back[k];
      back_sum = SafeDivisor(back_sum);
      for (int64_t k = 0; k < L; ++k) back[k] /= back_sum;
    }
    double final_sum = 0.0;
    for (int64_t j = 0; j < L; ++j) final_sum += alphas[(n - 1) * L + j] * exp_end[j];
    log_z += std::log(std::max(final_sum, kTiny));
    *objective = static_cast<T>(mask[0] ? score - log_z : 0.0);

    // marginals p(y_t = j) = alpha_t beta_t / overlap_t; following_t = weights_t beta_t /
    // (total_t overlap_t), so that p(y_{t-1} = i, y_t = j) = alpha_{t-1}(i) exp_trans(i, j)
    // following_t(j)
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0.0;
      for (int64_t j = 0; j < L; ++j) dot += alphas[t * L + j] * betas[t * L + j];
      const double overlap = SafeDivisor(dot);
      const double live = mask[t] ? 1.0 : 0.0;
      const bool is_last = last(t);
      for (int64_t j = 0; j < L; ++j) {
        const int64_t k = t * L + j;
        const double marginal = alphas[k] * betas[k] / overlap * live;
        const double gradient = labels[k] - marginal;
        const bool floored =
            mask[t] && static_cast<double>(emissions[k]) < floor;   // no gradient there
        d_emissions[k] = static_cast<T>(floored ? 0.0 : gradient);
        if (t == 0) d_start[j] = static_cast<T>(gradient);
        if (is_last) end_gradient[j] += gradient;
        const int64_t out = t * stride + j;
        labels_out[out] = static_cast<T>(labels[k]);
        alphas_out[out] = static_cast<T>(alphas[k]);
        following_out[out] =
            static_cast<T>(weights[k] * betas[k] / (totals[t] * overlap) * live);
      }
    }
    for (int64_t j = 0; j < L; ++j) d_end[j] = static_cast<T>(end_gradient[j]);
  }
};

template <typename T>
class CrfForwardBackwardOp : public tf::OpKernel {
 public:
  explicit CrfForwardBackwardOp(tf::OpKernelConstruction* context) : tf::OpKernel(context) {
    float floor;
    OP_REQUIRES_OK(context, context->GetAttr("floor", &floor));
    floor_ = floor;
  }

  void Compute(tf::OpKernelContext* context) override {
    const tf::Tensor &emissions = context->input(0), &labels = context->input(1),
                 &mask = context->input(2), &transitions = context->input(3),
                 &start = context->input(4), &end = context->input(5);
    using tf::errors::InvalidArgument;
    OP_REQUIRES(context, emissions.dims() == 3,
                InvalidArgument("emissions must be (batch, n, L), got ",
                                emissions.shape().DebugString()));
    const int64_t batch = emissions.dim_size(0), n = emissions.dim_size(1),
                  L = emissions.dim_size(2);
    OP_REQUIRES(context, labels.shape() == emissions.shape(),
                InvalidArgument("labels ", labels.shape().DebugString(), " for emissions ",
                                emissions.shape().DebugString()));
    OP_REQUIRES(context, mask.shape() == tf::TensorShape({batch, n}),
                InvalidArgument("mask ", mask.shape().DebugString(), " for emissions ",
                                emissions.shape().DebugString()));
    OP_REQUIRES(context, transitions.shape() == tf::TensorShape({L, L}),
                InvalidArgument("transitions ", transitions.shape().DebugString(), " for ", L,
                                " labels"));
    OP_REQUIRES(context,
                start.shape() == tf::TensorShape({L}) && end.shape() == tf::TensorShape({L}),
                InvalidArgument("start ", start.shape().DebugString(), " and end ",
                                end.shape().DebugString(), " for ", L, " labels"));
    tf::Tensor* outputs[8];
    const tf::TensorShape shapes[8] = {{batch}, emissions.shape(), {batch, L}, {batch, L},
                                   {n, batch, L}, {n, batch, L}, {n, batch, L}, {L, L}};
    for (int i = 0; i < 8; ++i) {
      OP_REQUIRES_OK(context, context->allocate_output(i, shapes[i], &outputs[i]));
    }
    if (L == 0) {                                   // no label: no path, nothing to score
      outputs[0]->flat<T>().setZero();
      return;
    }

    std::vector<double> trans64(L * L), start64(L), end64(L), exp_trans(L * L),
        exp_trans_t(L * L), exp_start(L), exp_end(L);
    auto widen = [](const tf::Tensor& t, std::vector<double>& out) {
      const T* data = t.flat<T>().data();
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(data[i]);
    };
    widen(transitions, trans64);
    widen(start, start64);
    widen(end, end64);
    auto peak = [](const std::vector<double>& values) {
      double peak = -INFINITY;
      for (double value : values) peak = NanMax(peak, value);
      return peak;
    };
    const double trans_peak = peak(trans64), start_peak = peak(start64), end_peak = peak(end64);
    T* exp_trans_out = outputs[7]->flat<T>().data();
    for (int64_t k = 0; k < L * L; ++k) {
      exp_trans[k] = std::exp(trans64[k] - trans_peak);
      exp_trans_out[k] = static_cast<T>(exp_trans[k]);
      exp_trans_t[(k % L) * L + k / L] = exp_trans[k];
    }
    for (int64_t j = 0; j < L; ++j) {
      exp_start[j] = std::exp(start64[j] - start_peak);
      exp_end[j] = std::exp(end64[j] - end_peak);
    }

    Example<T> example;
    example.n = n, example.num_labels = L, example.stride = batch * L, example.floor = floor_;
    example.exp_trans = exp_trans.data(), example.exp_trans_t = exp_trans_t.data();
    example.exp_start = exp_start.data(), example.exp_end = exp_end.data();
    example.transitions = trans64.data(), example.start = start64.data();
    example.end = end64.data();
    example.transitions_peak = trans_peak, example.boundary_peaks = start_peak + end_peak;
    example.transitions_finite = std::all_of(trans64.begin(), trans64.end(),
                                             [](double x) { return std::isfinite(x); });
    const T* emissions_data = emissions.flat<T>().data();
    const T* labels_data = labels.flat<T>().data();
    const bool* mask_data = mask.flat<bool>().data();
    T* data[7];
    for (int i = 0; i < 7; ++i) data[i] = outputs[i]->flat<T>().data();
    auto examples_from = [&](int64_t begin, int64_t finish) {
      std::vector<double> work;
      for (int64_t b = begin; b < finish; ++b) {
        const int64_t rows = b * n * L;
        example.Run(emissions_data + rows, labels_data + rows, mask_data + b * n, data[0] + b,
                    data[1] + rows, data[2] + b * L, data[3] + b * L, data[4] + b * L,
                    data[5] + b * L, data[6] + b * L, work);
      }
    };
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    tf::Shard(workers->num_threads, workers->workers, batch,
                      std::max<int64_t>(12 * n * L * L, 1), examples_from);
  }

 private:
  double floor_;
};

REGISTER_KERNEL_BUILDER(
    Name("CrfLrForwardBackward").Device(tf::DEVICE_CPU).TypeConstraint<float>("T"),
    CrfForwardBackwardOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("CrfLrForwardBackward").Device(tf::DEVICE_CPU).TypeConstraint<double>("T"),
    CrfForwardBackwardOp<double>);

}  // namespace crf_lr
