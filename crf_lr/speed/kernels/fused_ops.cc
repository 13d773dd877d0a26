// One-pass CPU kernels for the training step of a BERT-family encoder (crf_lr.fused_kernels).
//
// TensorFlow runs bert4keras's erf GELU as five element-wise ops and its gradient as about nine,
// and the gradient of a softmax as four, and a layer norm as seven each way: each a pass
// over a (batch x n, 4 x hidden) or (batch, heads, n, n) tensor. These kernels make each one
// pass, computing in float32 for float32 and bfloat16 tensors:
//
//   CrfLrGelu(x)                 0.5 x (1 + erf(x / sqrt 2)), bert4keras's gelu_erf
//   CrfLrGeluGrad(dy, x)         dy (0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi))
//   CrfLrSoftmaxGrad(dy, y)      scale y (dy - sum(dy y)) over the last axis, where
//                                y = softmax(scale x) (attention's scores over sqrt(head size))
//   CrfLrLayerNorm(x, gamma, beta)   y = x_hat gamma + beta, x_hat = (x - mean) / std,
//                                std = sqrt(variance + epsilon) per row; also mean and std
//   CrfLrLayerNormGrad(dy, x, gamma, mean, std)   dx = (g - mean(g) - x_hat mean(g x_hat)) / std
//                                with g = dy gamma; dgamma, dbeta: dy x_hat and dy summed over
//                                the rows (float32 over chunks of rows, double across them)
//   CrfLrBiasGrad(dy)            bfloat16 only: the sum of dy over every axis but the last (a
//                                bias's gradient) in float32 over chunks of rows and in double
//                                across them, where TensorFlow's BiasAddGrad
//                                sums bfloat16 in bfloat16, slower and far off
//
// (bert4keras's layer norm with its scale and offset: its statistics, the affine step and the
// gradient in float32 here, rounded once to the tensor's type.)
//
// Built against the installed TensorFlow by crf_lr/native_build.py; nothing here is needed to
// run crf_lr (TensorFlow's own ops are used where it cannot be built).
#define EIGEN_USE_THREADS
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/platform/mutex.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "unsupported/Eigen/SpecialFunctions"

namespace crf_lr {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using CPUDevice = Eigen::ThreadPoolDevice;

constexpr float kSqrt2 = 1.4142135623730951f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

REGISTER_OP("CrfLrGelu")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("CrfLrGeluGrad")
    .Input("dy: T")
    .Input("x: T")
    .Output("dx: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("CrfLrSoftmaxGrad")
    .Input("dy: T")
    .Input("y: T")
    .Output("dx: T")
    .Attr("scale: float = 1.0")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("CrfLrLayerNorm")
    .Input("x: T")
    .Input("gamma: T")
    .Input("beta: T")
    .Output("y: T")
    .Output("mean: float")
    .Output("std: float")
    .Attr("epsilon: float")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      tensorflow::shape_inference::ShapeHandle rows;
      TF_RETURN_IF_ERROR(c->Subshape(c->input(0), 0, -1, &rows));
      c->set_output(1, rows);
      c->set_output(2, rows);
      return tensorflow::OkStatus();
    });

REGISTER_OP("CrfLrLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: T")
    .Input("mean: float")
    .Input("std: float")
    .Output("dx: T")
    .Output("dgamma: T")
    .Output("dbeta: T")
    .Attr("T: {float, bfloat16}")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(2));
      return tensorflow::OkStatus();
    });

REGISTER_OP("CrfLrBiasGrad")
    .Input("dy: bfloat16")
    .Output("db: bfloat16")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle dy;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &dy));
      c->set_output(0, c->Vector(c->Dim(dy, -1)));
      return tensorflow::OkStatus();
    });

bool SameShapes(OpKernelContext* context) {
  if (context->input(0).shape() == context->input(1).shape()) return true;
  context->CtxFailure(tensorflow::errors::InvalidArgument(
      "inputs of different shapes: ", context->input(0).shape().DebugString(), " and ",
      context->input(1).shape().DebugString()));
  return false;
}

// Calls rows_from(begin, end) on the CPU worker threads for rows of n entries each.
template <typename Rows>
void ForEachRow(OpKernelContext* context, int64_t rows, int64_t n, Rows rows_from) {
  auto* workers = context->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(workers->num_threads, workers->workers, rows, std::max<int64_t>(6 * n, 1),
                    rows_from);
}

// Row sums in float32 over kLanes partial sums, one per entry index mod kLanes, added up
// pairwise at the end (LaneTotal): the same sums in the same order at every instruction-set
// level, where `omp simd reduction` keeps as many partial sums as a vector has lanes (SSE's 4
// give a larger error over long rows than AVX-512's 16, and another result).
constexpr int kLanes = 16;

// The total of kLanes partial sums, added pairwise in a fixed order.
inline float LaneTotal(const float* lanes) {
  float sums[kLanes];
  std::copy(lanes, lanes + kLanes, sums);
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) sums[k] += sums[k + width];
  }
  return sums[0];
}

// The sum of value(i) over i in [0, n), in kLanes partial sums. Unrolled rather than an
// `omp simd` loop: so the partial sums stay in registers at every vector width (through memory
// at AVX2's, an `omp simd` loop over them was up to 25 % slower there).
template <typename Value>
inline float LaneSum(int64_t n, Value value) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 16
    for (int lane = 0; lane < kLanes; ++lane) lanes[lane] += value(i + lane);
  }
  for (int lane = 0; i < n; ++i, ++lane) lanes[lane] += value(i);
  return LaneTotal(lanes);
}

// Calls term(i, lane) for i in [0, n), lane = i mod kLanes, a block of kLanes at a time as one
// vector loop, for a row's partial sums beside other work per entry (term adds entry i's values
// to partial sums [lane] and may write entry i's outputs).
template <typename Term>
inline void ForEachLane(int64_t n, Term term) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int lane = 0; lane < kLanes; ++lane) term(i + lane, lane);
  }
  for (int lane = 0; i < n; ++i, ++lane) term(i, lane);
}

// Entries per row of a tensor seen as rows of its last axis (dims >= 1).
int64_t RowLength(const Tensor& t) { return t.dim_size(t.dims() - 1); }

// Rows of a tensor seen as rows of its last axis (dims >= 1): its leading dimensions' product,
// which a last axis of length 0 does not change.
int64_t RowCount(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.dims(); ++i) rows *= t.dim_size(i);
  return rows;
}

template <typename T>
class GeluOp : public OpKernel {
 public:
  explicit GeluOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    auto x32 = x.flat<T>().template cast<float>();
    // bert4keras's order: (0.5 x) (1 + erf(x / sqrt 2))
    y->flat<T>().device(context->eigen_device<CPUDevice>()) =
        ((x32 * 0.5f) * ((x32 / kSqrt2).erf() + 1.0f)).template cast<T>();
  }
};

template <typename T>
class GeluGradOp : public OpKernel {
 public:
  explicit GeluGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    if (!SameShapes(context)) return;
    const Tensor& x = context->input(1);
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context,
                   context->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    auto x32 = x.flat<T>().template cast<float>();
    auto dy32 = context->input(0).flat<T>().template cast<float>();
    dx->flat<T>().device(context->eigen_device<CPUDevice>()) =
        (dy32 * (((x32 / kSqrt2).erf() + 1.0f) * 0.5f +
                 x32 * (x32 * x32 * -0.5f).exp() * kInvSqrt2Pi))
            .template cast<T>();
  }
};

template <typename T>
class SoftmaxGradOp : public OpKernel {
 public:
  explicit SoftmaxGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("scale", &scale_));
  }

  void Compute(OpKernelContext* context) override {
    if (!SameShapes(context)) return;
    const Tensor& y = context->input(1);
    OP_REQUIRES(context, y.dims() >= 1,
                tensorflow::errors::InvalidArgument("a softmax of a scalar"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context,
                   context->forward_input_or_allocate_output({0}, 0, y.shape(), &dx));
    const int64_t rows = RowCount(y), n = RowLength(y);
    const T* dy_data = context->input(0).flat<T>().data();
    const T* y_data = y.flat<T>().data();
    T* dx_data = dx->flat<T>().data();
    const float scale = scale_;
    auto rows_from = [=](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* dy_row = dy_data + row * n;
        const T* y_row = y_data + row * n;
        T* dx_row = dx_data + row * n;   // may be dy_row: each entry is read before it is written
        const float dot = LaneSum(n, [&](int64_t i) {
          return static_cast<float>(dy_row[i]) * static_cast<float>(y_row[i]);
        });
        for (int64_t i = 0; i < n; ++i) {
          dx_row[i] = static_cast<T>(static_cast<float>(y_row[i]) *
                                     (static_cast<float>(dy_row[i]) - dot) * scale);
        }
      }
    };
    ForEachRow(context, rows, n, rows_from);
  }

 private:
  float scale_;
};

// A double rounded once to the nearest bfloat16 (ties to even): the float between is rounded to
// odd, so that it keeps which side of a bfloat16 halfway point the double lies on.
Eigen::bfloat16 ToBfloat16(double value) {
  float single = static_cast<float>(value);
  if (static_cast<double>(single) != value && std::isfinite(single)) {
    if (std::fabs(static_cast<double>(single)) > std::fabs(value)) {
      single = std::nextafter(single, 0.f);                  // toward zero, then odd
    }
    uint32_t bits;
    std::memcpy(&bits, &single, sizeof bits);
    bits |= 1u;
    std::memcpy(&single, &bits, sizeof bits);
  }
  return static_cast<Eigen::bfloat16>(single);
}

// A double rounded once to T.
template <typename T>
T Rounded(double value);
template <>
float Rounded<float>(double value) { return static_cast<float>(value); }
template <>
Eigen::bfloat16 Rounded<Eigen::bfloat16>(double value) { return ToBfloat16(value); }

// Rows summed in float32 before their sums are added up in double.
constexpr int64_t kRowChunk = 256;

// Column sums over rows: each work unit adds its rows' values in float32 over chunks of kRowChunk
// rows and in double across them; the units' totals are then added in the order of their first
// rows, so that the totals are the same in every run (the units are the same for the same rows
// and threads; the order in which they finish is not).
class ColumnTotals {
 public:
  explicit ColumnTotals(int64_t columns) : columns_(columns) {}

  // Calls add_row(row, sums) for every row of row_length entries, on the worker threads: it adds
  // the row's values to sums (one float per column) and may write the row's own outputs.
  template <typename AddRow>
  void Sum(OpKernelContext* context, int64_t rows, int64_t row_length, AddRow add_row) {
    auto rows_from = [&](int64_t begin, int64_t end) {
      std::vector<double> own(columns_, 0.0);
      std::vector<float> chunk_sums(columns_);
      for (int64_t chunk = begin; chunk < end; chunk += kRowChunk) {
        std::fill(chunk_sums.begin(), chunk_sums.end(), 0.f);
        for (int64_t row = chunk; row < std::min(end, chunk + kRowChunk); ++row) {
          add_row(row, chunk_sums.data());
        }
        for (int64_t i = 0; i < columns_; ++i) own[i] += chunk_sums[i];
      }
      tensorflow::mutex_lock held(lock_);
      unit_totals_.emplace(begin, std::move(own));
    };
    ForEachRow(context, rows, row_length, rows_from);
  }

  // Columns [first, first + count)'s totals, each rounded once to T, into out.
  template <typename T>
  void RoundedInto(int64_t first, int64_t count, T* out) const {
    std::vector<double> totals(count, 0.0);
    for (const auto& unit : unit_totals_) {
      for (int64_t i = 0; i < count; ++i) totals[i] += unit.second[first + i];
    }
    for (int64_t i = 0; i < count; ++i) out[i] = Rounded<T>(totals[i]);
  }

 private:
  const int64_t columns_;
  std::map<int64_t, std::vector<double>> unit_totals_;    // by the unit's first row
  tensorflow::mutex lock_;
};

// A vector of n entries (gamma or beta) in float32; false (and the op failed) for another size.
template <typename T>
bool RowVector(OpKernelContext* context, int index, int64_t n, std::vector<float>* out) {
  const Tensor& t = context->input(index);
  if (t.NumElements() != n) {
    context->CtxFailure(tensorflow::errors::InvalidArgument(
        "input ", index, " has ", t.NumElements(), " entries for rows of ", n));
    return false;
  }
  const T* data = t.flat<T>().data();
  out->assign(n, 0.f);
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<float>(data[i]);
  return true;
}

template <typename T>
class LayerNormOp : public OpKernel {
 public:
  explicit LayerNormOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    OP_REQUIRES(context, x.dims() >= 1,
                tensorflow::errors::InvalidArgument("a layer norm of a scalar"));
    const int64_t rows = RowCount(x), n = RowLength(x);
    std::vector<float> gamma, beta;
    if (!RowVector<T>(context, 1, n, &gamma) || !RowVector<T>(context, 2, n, &beta)) return;
    tensorflow::TensorShape rows_shape = x.shape();
    rows_shape.RemoveLastDims(1);
    Tensor *y = nullptr, *mean_out = nullptr, *std_out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    OP_REQUIRES_OK(context, context->allocate_output(1, rows_shape, &mean_out));
    OP_REQUIRES_OK(context, context->allocate_output(2, rows_shape, &std_out));
    const T* x_data = x.flat<T>().data();
    T* y_data = y->flat<T>().data();
    float* mean_data = mean_out->flat<float>().data();
    float* std_data = std_out->flat<float>().data();
    const float* gamma_data = gamma.data();
    const float* beta_data = beta.data();
    const float epsilon = epsilon_;
    auto rows_from = [=](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* x_row = x_data + row * n;
        T* y_row = y_data + row * n;
        const float sum = LaneSum(n, [&](int64_t i) { return static_cast<float>(x_row[i]); });
        const float mean = n > 0 ? sum / n : 0.f;
        const float squares = LaneSum(n, [&](int64_t i) {
          const float centred = static_cast<float>(x_row[i]) - mean;
          return centred * centred;
        });
        const float std = std::sqrt((n > 0 ? squares / n : 0.f) + epsilon);
        const float inverse = std > 0.f ? 1.f / std : 0.f;     // divide_no_nan, as bert4keras
        mean_data[row] = mean;
        std_data[row] = std;
        for (int64_t i = 0; i < n; ++i) {
          const float x_hat = (static_cast<float>(x_row[i]) - mean) * inverse;
          y_row[i] = static_cast<T>(x_hat * gamma_data[i] + beta_data[i]);
        }
      }
    };
    ForEachRow(context, rows, n, rows_from);
  }

 private:
  float epsilon_;
};

template <typename T>
class LayerNormGradOp : public OpKernel {
 public:
  explicit LayerNormGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    if (!SameShapes(context)) return;
    const Tensor& x = context->input(1);
    OP_REQUIRES(context, x.dims() >= 1,
                tensorflow::errors::InvalidArgument("a layer norm of a scalar"));
    const int64_t rows = RowCount(x), n = RowLength(x);
    std::vector<float> gamma;
    if (!RowVector<T>(context, 2, n, &gamma)) return;
    const Tensor& mean_in = context->input(3);
    const Tensor& std_in = context->input(4);
    OP_REQUIRES(context, mean_in.NumElements() == rows && std_in.NumElements() == rows,
                tensorflow::errors::InvalidArgument(
                    "mean and std have ", mean_in.NumElements(), " and ", std_in.NumElements(),
                    " entries for ", rows, " rows"));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(context, context->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    const tensorflow::TensorShape& vector_shape = context->input(2).shape();
    OP_REQUIRES_OK(context, context->allocate_output(1, vector_shape, &dgamma));
    OP_REQUIRES_OK(context, context->allocate_output(2, vector_shape, &dbeta));
    const T* dy_data = context->input(0).flat<T>().data();
    const T* x_data = x.flat<T>().data();
    const float* mean_data = mean_in.flat<float>().data();
    const float* std_data = std_in.flat<float>().data();
    const float* gamma_data = gamma.data();
    T* dx_data = dx->flat<T>().data();
    ColumnTotals totals(2 * n);          // dgamma's n columns, then dbeta's
    auto add_row = [=](int64_t row, float* sums) {
      const T* dy_row = dy_data + row * n;
      const T* x_row = x_data + row * n;
      T* dx_row = dx_data + row * n;     // may be dy_row: each entry is read before it is written
      const float mean = mean_data[row];
      const float inverse = std_data[row] > 0.f ? 1.f / std_data[row] : 0.f;
      float g_sums[kLanes] = {}, g_x_hat_sums[kLanes] = {};
      ForEachLane(n, [&](int64_t i, int lane) {
        const float dy = static_cast<float>(dy_row[i]);
        const float x_hat = (static_cast<float>(x_row[i]) - mean) * inverse;
        const float g = dy * gamma_data[i];
        g_sums[lane] += g;
        g_x_hat_sums[lane] += g * x_hat;
        sums[i] += dy * x_hat;
        sums[n + i] += dy;
      });
      const float mean_g = n > 0 ? LaneTotal(g_sums) / n : 0.f;
      const float mean_g_x_hat = n > 0 ? LaneTotal(g_x_hat_sums) / n : 0.f;
      for (int64_t i = 0; i < n; ++i) {
        const float x_hat = (static_cast<float>(x_row[i]) - mean) * inverse;
        dx_row[i] = static_cast<T>(
            (static_cast<float>(dy_row[i]) * gamma_data[i] - mean_g - x_hat * mean_g_x_hat) *
            inverse);
      }
    };
    totals.Sum(context, rows, n, add_row);
    totals.RoundedInto(0, n, dgamma->flat<T>().data());
    totals.RoundedInto(n, n, dbeta->flat<T>().data());
  }
};

class BiasGradOp : public OpKernel {
 public:
  explicit BiasGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  // Rows summed whole (contiguous reads) in chunks: ColumnTotals.
  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    OP_REQUIRES(context, dy.dims() >= 1,
                tensorflow::errors::InvalidArgument("the bias gradient of a scalar"));
    const int64_t rows = RowCount(dy), n = RowLength(dy);
    Tensor* db = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, tensorflow::TensorShape({n}), &db));
    const Eigen::bfloat16* dy_data = dy.flat<Eigen::bfloat16>().data();
    ColumnTotals totals(n);
    auto add_row = [=](int64_t row, float* sums) {
      const Eigen::bfloat16* values = dy_data + row * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sums[i] += static_cast<float>(values[i]);
    };
    totals.Sum(context, rows, n, add_row);
    totals.RoundedInto(0, n, db->flat<Eigen::bfloat16>().data());
  }
};

#define CRF_LR_REGISTER(T)                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("CrfLrGelu").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), GeluOp<T>);  \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("CrfLrGeluGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),          \
      GeluGradOp<T>);                                                                       \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("CrfLrSoftmaxGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),       \
      SoftmaxGradOp<T>);                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("CrfLrLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),         \
      LayerNormOp<T>);                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("CrfLrLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),     \
      LayerNormGradOp<T>);

CRF_LR_REGISTER(float)
CRF_LR_REGISTER(Eigen::bfloat16)
REGISTER_KERNEL_BUILDER(Name("CrfLrBiasGrad").Device(tensorflow::DEVICE_CPU), BiasGradOp);

}  // namespace crf_lr
