// ops.h: argument checks (messages name the op), then dispatch to the active ISA's kernels.
#include "infer/kernels/ops.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "infer/core/error.h"
#include "infer/kernels/cpu/dispatch.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/cpu/kernels.h"

namespace infer::kernels {

namespace {

// Quantized products: on kAvx512Amx the tile kernels (many rows), on kAvxVnni the vpdpbusd
// ones, otherwise the active ISA's.
void QuantizedProducts(const float* x, int64_t m, int64_t k, int64_t x_stride,
                       std::span<const cpu::Product> outputs, ThreadPool& pool) {
  if (ActiveIsa() == Isa::kAvx512Amx) {
    cpu::avx512amx::QuantizedMatMuls(x, m, k, x_stride, outputs, pool);
    return;
  }
  if (ActiveIsa() == Isa::kAvxVnni) {
    cpu::avxvnni::QuantizedMatMuls(x, m, k, x_stride, outputs, pool);
    return;
  }
  INFER_DISPATCH(QuantizedMatMuls, x, m, k, x_stride, outputs, pool);
}

// Rows [begin, end) of x as a quantized MatMul rounds them (QuantizeActivations: d q per block
// of kQuantBlock), into `rounded` (row i at rounded + (i - begin) rounded_stride). Its scratch is
// the calling thread's own, so pool workers may call it for their rows.
void RoundAsQuantizedMatMul(const float* x, int64_t begin, int64_t end, int64_t k, int64_t x_stride,
                            float* rounded, int64_t rounded_stride) {
  const int64_t padded_k = (k + kQuantBlock - 1) / kQuantBlock * kQuantBlock;
  const int64_t blocks = padded_k / kQuantBlock;
  const int64_t rows = end - begin;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int32_t> sum;
  q.resize(static_cast<size_t>(rows * padded_k));
  d.resize(static_cast<size_t>(rows * blocks));
  sum.resize(static_cast<size_t>(rows * blocks));
  QuantizeActivations(x + begin * x_stride, rows, k, x_stride, padded_k, q.data(), d.data(),
                      sum.data());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < k; ++c) {
      rounded[i * rounded_stride + c] =
          d[i * blocks + c / kQuantBlock] * static_cast<float>(q[i * padded_k + c]);
    }
  }
}

// QuantizedActivations::kInt8x2: the rows of x, then what rounding them to int8 leaves (x - d q
// per block, RoundAsQuantizedMatMul), through QuantizedProducts as 2m rows; row i of each output
// is then the sum of its rows i and m + i, plus the bias.
void QuantizedProductsInt8x2(const float* x, int64_t m, int64_t k, int64_t x_stride,
                             std::span<const cpu::Product> outputs, ThreadPool& pool) {
  thread_local std::vector<float> planes, partial;
  thread_local std::vector<cpu::Product> stacked;
  planes.resize(static_cast<size_t>(2 * m * k));
  // (The workers see their own thread_local buffers: the lambdas take this pointer.)
  float* const plane = planes.data();
  pool.ParallelFor(m, 1, [&](int64_t begin, int64_t end) {
    RoundAsQuantizedMatMul(x, begin, end, k, x_stride, plane + (m + begin) * k, k);
    for (int64_t i = begin; i < end; ++i) {
      const float* row = x + i * x_stride;
      float* value = plane + i * k;
      float* rest = plane + (m + i) * k;
      for (int64_t c = 0; c < k; ++c) {
        value[c] = row[c];
        rest[c] = row[c] - rest[c];
      }
    }
  });
  int64_t total = 0;
  for (const cpu::Product& o : outputs) total += 2 * m * o.w->rows();
  partial.resize(static_cast<size_t>(total));
  stacked.clear();
  float* at = partial.data();
  for (const cpu::Product& o : outputs) {
    stacked.push_back({o.w, nullptr, at, o.w->rows()});
    at += 2 * m * o.w->rows();
  }
  QuantizedProducts(plane, 2 * m, k, k, stacked, pool);
  const cpu::Product* const planes_out = stacked.data();
  pool.ParallelFor(m * static_cast<int64_t>(outputs.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const cpu::Product& o = outputs[static_cast<size_t>(task / m)];
      const cpu::Product& s = planes_out[task / m];
      const int64_t i = task % m;
      const int64_t n = o.w->rows();
      const float* value = s.y + i * n;
      const float* rest = s.y + (m + i) * n;
      float* y = o.y + i * o.y_stride;
      for (int64_t j = 0; j < n; ++j) {
        y[j] = value[j] + rest[j] + (o.bias != nullptr ? o.bias[j] : 0.0F);
      }
    }
  });
}

void QuantizedProducts(const float* x, int64_t m, int64_t k, int64_t x_stride,
                       std::span<const cpu::Product> outputs, ThreadPool& pool,
                       QuantizedActivations activations) {
  if (activations == QuantizedActivations::kInt8x2) {
    QuantizedProductsInt8x2(x, m, k, x_stride, outputs, pool);
  } else {
    QuantizedProducts(x, m, k, x_stride, outputs, pool);
  }
}

bool IsFloat(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

void CheckFloatVector(const char* op, const char* what, const Tensor& t, int64_t size) {
  INFER_CHECK(t.defined() && (t.raw() != nullptr || size == 0), "{}: {} has no data", op, what);
  INFER_CHECK(IsFloat(t.dtype()), "{}: {} has dtype {}, expected f32, bf16 or f16", op, what,
              DTypeName(t.dtype()));
  INFER_CHECK(t.rank() == 1 && t.dim(0) == size && t.is_contiguous(),
              "{}: {} has shape {}, expected [{}]", op, what, ShapeString(t.shape()), size);
}

void WidenToF32(const Tensor& t, std::vector<float>& out) {
  out.resize(static_cast<size_t>(t.numel()));
  INFER_DISPATCH(WidenScale, t.dtype(), t.raw(), t.numel(), 1.0F, out.data());
}

}  // namespace

std::string_view MatMulPrecisionName(MatMulPrecision precision) {
  switch (precision) {
    case MatMulPrecision::kBf16:
      return "bf16";
    case MatMulPrecision::kInt8:
      return "int8";
    case MatMulPrecision::kF32:
      break;
  }
  return "f32";
}

MatMulPrecision AutoMatMulPrecision() {
  const Isa isa = ActiveIsa();
  const bool native = isa == Isa::kAvx512Amx || (isa == Isa::kAvx512Bf16 && Bf16DotOutrunsF32());
  return native ? MatMulPrecision::kBf16 : MatMulPrecision::kF32;
}

std::string_view QuantizedActivationsName(QuantizedActivations activations) {
  return activations == QuantizedActivations::kInt8x2 ? "int8x2" : "int8";
}

QuantizedActivations ParseQuantizedActivations(std::string_view name) {
  if (name == "int8") return QuantizedActivations::kInt8;
  if (name == "int8x2") return QuantizedActivations::kInt8x2;
  Fail("quantized activations '{}' is not one of int8, int8x2", name);
}

MatMulPrecision ParseMatMulPrecision(std::string_view name) {
  if (name == "f32") return MatMulPrecision::kF32;
  if (name == "bf16") return MatMulPrecision::kBf16;
  if (name == "auto") return AutoMatMulPrecision();
  Fail("matmul precision '{}' is not one of auto, f32, bf16", name);
}

int PackedMatrix::QuantAt(int64_t row, int64_t col) const {
  bool high = false;
  const auto* bytes = static_cast<const uint8_t*>(data());
  const int64_t at = QuantIndex(row, col, &high);
  if (quantization_ == Quantization::kInt8) return bytes[at];
  const int low = high ? bytes[at] >> 4 : bytes[at] & 0x0f;
  if (!HasTopPlane(quantization_)) return low;
  const int64_t quad = col % kQuantBlock / 4;
  return low | (bytes[at + Int6TopDelta(quad)] >> Int6TopShift(quad) & 3) << 4;
}

namespace {
float F16At(const void* bytes, int64_t index) {
  uint16_t value = 0;
  std::memcpy(&value, static_cast<const uint8_t*>(bytes) + index, 2);
  return F16ToF32(value);
}
}  // namespace

float PackedMatrix::ScaleAt(int64_t row, int64_t group) const {
  return F16At(data(), ScaleIndex(row, group));
}

float PackedMatrix::MinimumAt(int64_t row, int64_t group) const {
  if (!HasMinimum(quantization_)) return 0.0F;
  return F16At(data(), ScaleIndex(row, group) + 2 * kPanelRows);
}

int PackedMatrix::SubBlockScaleBits(int64_t row, int64_t block, bool minimum) const {
  INFER_CHECK(HasInt4KScales(quantization_), "SubBlockScaleBits: not an int4k or int5k matrix");
  const int64_t group = block * kQuantBlock / group_size_;
  const int64_t b = block % (group_size_ / kQuantBlock);
  uint32_t words[3];
  for (int i = 0; i < 3; ++i) {
    std::memcpy(&words[i], static_cast<const uint8_t*>(data()) + ScaleWordIndex(row, group, i), 4);
  }
  return Int4KScaleBits(words, b, minimum);
}

float PackedMatrix::SubBlockScale(int64_t row, int64_t block) const {
  INFER_CHECK(quantization_ != Quantization::kInt6K,
              "SubBlockScale: an int6k matrix scales each 16 channels (ChannelScale)");
  const int64_t group = block * kQuantBlock / group_size_;
  if (!HasInt4KScales(quantization_)) return ScaleAt(row, group);
  return ScaleAt(row, group) * static_cast<float>(SubBlockScaleBits(row, block, false));
}

float PackedMatrix::SubBlockMinimum(int64_t row, int64_t block) const {
  const int64_t group = block * kQuantBlock / group_size_;
  if (!HasInt4KScales(quantization_)) return MinimumAt(row, group);
  return MinimumAt(row, group) * static_cast<float>(SubBlockScaleBits(row, block, true));
}

int PackedMatrix::Int6KHalfScale(int64_t row, int64_t half) const {
  INFER_CHECK(quantization_ == Quantization::kInt6K, "Int6KHalfScale: not an int6k matrix");
  const int64_t group = half / kInt6KHalves;
  return static_cast<const int8_t*>(data())[Int6KScaleIndex(row, group, half % kInt6KHalves)];
}

float PackedMatrix::ChannelScale(int64_t row, int64_t col) const {
  if (quantization_ != Quantization::kInt6K) return SubBlockScale(row, col / kQuantBlock);
  return ScaleAt(row, col / group_size_) * static_cast<float>(Int6KHalfScale(row, col / 16));
}

float PackedMatrix::At(int64_t row, int64_t col) const {
  if (quantized()) {
    const int64_t block = col / kQuantBlock;
    const float d = ChannelScale(row, col);
    const int offset = QuantStoredOffset(quantization_);
    if (offset != 0) return d * static_cast<float>(QuantAt(row, col) - offset);
    return d * static_cast<float>(QuantAt(row, col)) + SubBlockMinimum(row, block);
  }
  const int64_t index = Index(row, col);
  switch (dtype()) {
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data())[index]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data())[index]);
    default:
      return static_cast<const float*>(data())[index];
  }
}

namespace {

// Copies rows [row_begin, row_end) of w to `dst`, the storage of `packed` (element type T: the
// bits are moved, not converted). A row's (k even, k odd) pair sits at the same offsets in
// every step, so Index() is asked once per row.
template <class T>
void PackRows(const Tensor& w, const PackedMatrix& packed, T* dst, int64_t row_begin,
              int64_t row_end) {
  const int64_t k = w.dim(1);
  const int64_t step_elems = 2 * PackedMatrix::kPanelRows;
  const T* src = w.data<const T>();
  for (int64_t row = row_begin; row < row_end; ++row) {
    T* even = dst + packed.Index(row, 0);
    T* odd = dst + packed.Index(row, 1);
    const T* values = src + row * k;
    for (int64_t col = 0; col < k; col += 2) {
      even[(col / 2) * step_elems] = values[col];
      if (col + 1 < k) odd[(col / 2) * step_elems] = values[col + 1];
    }
  }
}

}  // namespace

PackedMatrix PackedMatrix::Copy(TensorArena* arena) const {
  PackedMatrix copy = *this;
  copy.storage_ = EmptyIn(arena, storage_.dtype(), storage_.shape());
  if (storage_.size_bytes() > 0)
    std::memcpy(copy.storage_.raw(), storage_.raw(), storage_.size_bytes());
  return copy;
}

PackedMatrix PackedMatrix::Pack(const Tensor& w, ThreadPool* pool, TensorArena* arena) {
  INFER_CHECK(w.rank() == 2, "PackedMatrix: weight has shape {}, expected [n, k]",
              ShapeString(w.shape()));
  INFER_CHECK(IsFloat(w.dtype()), "PackedMatrix: weight has dtype {}, expected f32, bf16 or f16",
              DTypeName(w.dtype()));
  INFER_CHECK(w.is_contiguous(), "PackedMatrix: weight {} is not contiguous",
              ShapeString(w.shape()));
  INFER_CHECK(w.raw() != nullptr || w.numel() == 0, "PackedMatrix: weight has no data");
  PackedMatrix packed;
  packed.rows_ = w.dim(0);
  packed.cols_ = w.dim(1);
  // At least one element, so that an empty matrix is still defined().
  const int64_t size = std::max<int64_t>(1, packed.num_panels() * packed.steps() * 2 * kPanelRows);
  packed.storage_ = EmptyIn(arena, w.dtype(), {size});
  if (w.numel() == 0) return packed;
  auto pack = [&](int64_t begin, int64_t end) {
    const int64_t row_begin = begin * kPanelRows;
    const int64_t row_end = std::min(packed.rows_, end * kPanelRows);
    if (DTypeSize(w.dtype()) == 2) {
      PackRows(w, packed, packed.storage_.data<uint16_t>(), row_begin, row_end);
    } else {
      PackRows(w, packed, packed.storage_.data<uint32_t>(), row_begin, row_end);
    }
  };
  ParallelForOn(pool, packed.num_panels(), 4, pack);
  return packed;
}

namespace {

// MatMul's checks of one product; bias as f32 (null if none), widened into `buffer` if needed.
// False when there is nothing to compute.
bool CheckMatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
                 const Tensor* bias, const float* y, int64_t y_stride, std::vector<float>& buffer,
                 const float*& bias_f32) {
  INFER_CHECK(w.defined(), "MatMul: weight is not packed");
  INFER_CHECK(w.cols() == k, "MatMul: weight has shape [{}, {}] but x has k = {}", w.rows(),
              w.cols(), k);
  const int64_t n = w.rows();
  INFER_CHECK(m >= 0, "MatMul: m = {} is negative", m);
  INFER_CHECK(x_stride >= k, "MatMul: x_stride {} < k {}", x_stride, k);
  INFER_CHECK(y_stride >= n, "MatMul: y_stride {} < n {}", y_stride, n);
  bias_f32 = nullptr;
  if (m == 0 || n == 0) return false;
  INFER_CHECK((x != nullptr || k == 0) && y != nullptr, "MatMul: null x or y");
  if (bias != nullptr) {
    CheckFloatVector("MatMul", "bias", *bias, n);
    if (bias->dtype() == DType::kF32) {
      bias_f32 = bias->data<const float>();
    } else {
      WidenToF32(*bias, buffer);
      bias_f32 = buffer.data();
    }
  }
  return true;
}

}  // namespace

void MatMuls(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const MatMulOutput> outputs, ThreadPool& pool, MatMulPrecision precision,
             QuantizedActivations activations) {
  // One region when the weights are alike: all quantized the same way, or all of one float
  // dtype (not under the kInt8 simulation); otherwise one MatMul each.
  auto alike = [&](const MatMulOutput& o) {
    const PackedMatrix& first = *outputs.front().w;
    if (o.w == nullptr || o.w->quantized() != first.quantized()) return false;
    return first.quantized() ? o.w->quantization() == first.quantization() &&
                                   o.w->group_size() == first.group_size()
                             : o.w->dtype() == first.dtype() && precision != MatMulPrecision::kInt8;
  };
  if (outputs.empty() || outputs.front().w == nullptr || !std::ranges::all_of(outputs, alike)) {
    for (const MatMulOutput& o : outputs) {
      INFER_CHECK(o.w != nullptr, "MatMuls: an output has no weight");
      MatMul(x, m, k, x_stride, *o.w, o.bias, o.y, o.y_stride, pool, precision, activations);
    }
    return;
  }
  thread_local std::vector<std::vector<float>> bias_buffers;
  thread_local std::vector<cpu::Product> products;
  bias_buffers.resize(outputs.size());
  products.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const MatMulOutput& o = outputs[i];
    const float* bias_f32 = nullptr;
    if (CheckMatMul(x, m, k, x_stride, *o.w, o.bias, o.y, o.y_stride, bias_buffers[i], bias_f32)) {
      products.push_back({o.w, bias_f32, o.y, o.y_stride});
    }
  }
  if (products.empty()) return;
  const std::span<const cpu::Product> all(products);
  if (outputs.front().w->quantized()) {
    QuantizedProducts(x, m, k, x_stride, all, pool, activations);
    return;
  }
  const bool bf16_activations =
      precision == MatMulPrecision::kBf16 && outputs.front().w->dtype() == DType::kBF16;
  if (bf16_activations && ActiveIsa() == Isa::kAvx512Amx) {
    cpu::avx512amx::MatMulsBf16Tiles(x, m, k, x_stride, all, pool);
    return;
  }
  INFER_DISPATCH(MatMuls, x, m, k, x_stride, all, pool, bf16_activations);
}

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const PackedMatrix& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision, QuantizedActivations activations) {
  thread_local std::vector<float> bias_buffer;
  const float* bias_f32 = nullptr;
  if (!CheckMatMul(x, m, k, x_stride, w, bias, y, y_stride, bias_buffer, bias_f32)) return;
  if (w.quantized()) {
    const cpu::Product product{&w, bias_f32, y, y_stride};
    QuantizedProducts(x, m, k, x_stride, std::span<const cpu::Product>(&product, 1), pool,
                      activations);
    return;
  }
  if (precision == MatMulPrecision::kInt8) {
    // x rounded as a quantized MatMul rounds it (d * q per block of 32), then f32 products.
    thread_local std::vector<float> rounded;
    rounded.resize(static_cast<size_t>(m * k));
    RoundAsQuantizedMatMul(x, 0, m, k, x_stride, rounded.data(), k);
    INFER_DISPATCH(MatMul, rounded.data(), m, k, k, w, bias_f32, y, y_stride, pool, false);
  }
  const bool bf16_activations = precision == MatMulPrecision::kBf16 && w.dtype() == DType::kBF16;
  if (bf16_activations && ActiveIsa() == Isa::kAvx512Amx) {
    const cpu::Product product{&w, bias_f32, y, y_stride};
    cpu::avx512amx::MatMulsBf16Tiles(x, m, k, x_stride, std::span<const cpu::Product>(&product, 1),
                                     pool);
    return;
  }
  INFER_DISPATCH(MatMul, x, m, k, x_stride, w, bias_f32, y, y_stride, pool, bf16_activations);
}

void MatMul(const float* x, int64_t m, int64_t k, int64_t x_stride, const Tensor& w,
            const Tensor* bias, float* y, int64_t y_stride, ThreadPool& pool,
            MatMulPrecision precision, QuantizedActivations activations) {
  INFER_CHECK(w.rank() == 2 && w.dim(1) == k, "MatMul: weight has shape {} but x has k = {}",
              ShapeString(w.shape()), k);
  MatMul(x, m, k, x_stride, PackedMatrix::Pack(w), bias, y, y_stride, pool, precision, activations);
}

void QuantizeActivations(const float* x, int64_t m, int64_t k, int64_t x_stride, int64_t padded_k,
                         int8_t* q, float* d, int32_t* sum) {
  INFER_CHECK(m >= 0 && k >= 0 && x_stride >= k,
              "QuantizeActivations: m = {}, k = {}, x_stride = {}", m, k, x_stride);
  INFER_CHECK(padded_k >= k && padded_k % kQuantBlock == 0,
              "QuantizeActivations: padded_k {} is not a multiple of {} at least k = {}", padded_k,
              kQuantBlock, k);
  if (m == 0) return;
  INFER_DISPATCH(QuantizeActivations, x, m, k, x_stride, padded_k, q, d, sum);
}

namespace {

void LoraShrinkRows(const float* x, int64_t x_stride, std::span<const int32_t> rows, int64_t k,
                    const LoraMatrices& delta, int64_t j0, int64_t j1, float* t, int64_t t_stride) {
  INFER_DISPATCH(LoraShrink, x, x_stride, rows, k, delta.a.dtype(), delta.a.raw(), j0, j1,
                 delta.scale, t, t_stride);
}

void LoraExpandRows(const float* t, int64_t t_stride, std::span<const int32_t> rows,
                    const LoraMatrices& delta, int64_t o0, int64_t o1, float* y, int64_t y_stride) {
  INFER_DISPATCH(LoraExpand, t, t_stride, rows, delta.rank(), delta.b.dtype(), delta.b.raw(), o0,
                 o1, y, y_stride);
}

// The columns of an output's y (every delta's n) after checking its groups.
int64_t CheckLoraOutput(const LoraOutput& output, int64_t m, int64_t k) {
  INFER_CHECK(output.y != nullptr, "LoraAdd: an output has no y");
  int64_t n = -1;
  for (const LoraRows& group : output.groups) {
    INFER_CHECK(group.delta != nullptr && group.delta->defined(), "LoraAdd: a group has no delta");
    const LoraMatrices& d = *group.delta;
    INFER_CHECK(
        IsFloat(d.a.dtype()) && IsFloat(d.b.dtype()) && d.a.is_contiguous() && d.b.is_contiguous(),
        "LoraAdd: lora matrices must be contiguous f32, bf16 or f16");
    INFER_CHECK(
        d.a.rank() == 2 && d.a.dim(1) == k &&
            d.b.shape() == Shape({(d.n + kLoraPanel - 1) / kLoraPanel, d.rank(), kLoraPanel}),
        "LoraAdd: a {} and b {} do not make a rank-r update of {} inputs to {} outputs",
        ShapeString(d.a.shape()), ShapeString(d.b.shape()), k, d.n);
    INFER_CHECK(n < 0 || d.n == n, "LoraAdd: one output's deltas have {} and {} columns", n, d.n);
    n = d.n;
    INFER_CHECK(output.y_stride >= n, "LoraAdd: y_stride {} < n {}", output.y_stride, n);
    for (const int32_t row : group.rows) {
      INFER_CHECK(row >= 0 && row < m, "LoraAdd: row {} outside [0, {})", row, m);
    }
  }
  return n;
}

}  // namespace

LoraMatrices LoraMatrices::Make(Tensor a, const Tensor& b, float scale) {
  INFER_CHECK(IsFloat(a.dtype()) && IsFloat(b.dtype()) && a.is_contiguous() && b.is_contiguous(),
              "LoRA matrices must be contiguous f32, bf16 or f16");
  INFER_CHECK(a.rank() == 2 && b.rank() == 2 && b.dim(1) == a.dim(0),
              "LoRA: a {} and b {} are not [rank, k] and [n, rank]", ShapeString(a.shape()),
              ShapeString(b.shape()));
  const int64_t rank = a.dim(0);
  const int64_t n = b.dim(0);
  const int64_t panels = (n + kLoraPanel - 1) / kLoraPanel;
  Tensor packed = Tensor::Empty(b.dtype(), {panels, rank, kLoraPanel});
  const size_t element = DTypeSize(b.dtype());
  std::memset(packed.raw(), 0, packed.size_bytes());
  const auto* src = static_cast<const std::byte*>(b.raw());
  auto* dst = static_cast<std::byte*>(packed.raw());
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t j = 0; j < rank; ++j) {
      const int64_t at = ((o / kLoraPanel) * rank + j) * kLoraPanel + o % kLoraPanel;
      std::memcpy(dst + at * element, src + (o * rank + j) * element, element);
    }
  }
  return {std::move(a), std::move(packed), n, scale};
}

void LoraAdd(const float* x, int64_t m, int64_t k, int64_t x_stride,
             std::span<const LoraOutput> outputs, ThreadPool& pool) {
  INFER_CHECK(m >= 0 && k >= 1 && x_stride >= k, "LoraAdd: m {} k {} x_stride {}", m, k, x_stride);
  // Each output's share of t: [m, its widest rank].
  std::vector<int64_t> columns(outputs.size()), t_offset(outputs.size()), t_stride(outputs.size());
  int64_t t_size = 0;
  for (size_t o = 0; o < outputs.size(); ++o) {
    columns[o] = CheckLoraOutput(outputs[o], m, k);
    for (const LoraRows& group : outputs[o].groups) {
      t_stride[o] = std::max(t_stride[o], group.delta->rank());
    }
    t_offset[o] = t_size;
    t_size += m * t_stride[o];
  }
  if (t_size == 0) return;
  // Shrink tasks: a group's rows in chunks, a few ranks each; expand tasks: column ranges of an
  // output, each over all of its groups.
  struct Task {
    size_t output;
    size_t group;
    int64_t begin, end;  // ranks (shrink) or columns (expand)
    size_t first_row, num_rows;
  };
  constexpr int64_t kRanksPerTask = 4;
  constexpr size_t kRowsPerTask = 32;
  constexpr int64_t kColumnsPerTask = 16 * kLoraPanel;
  std::vector<Task> shrink, expand;
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (size_t g = 0; g < outputs[o].groups.size(); ++g) {
      const LoraRows& group = outputs[o].groups[g];
      for (size_t r = 0; r < group.rows.size(); r += kRowsPerTask) {
        for (int64_t j = 0; j < group.delta->rank(); j += kRanksPerTask) {
          shrink.push_back({o, g, j, std::min(j + kRanksPerTask, group.delta->rank()), r,
                            std::min(kRowsPerTask, group.rows.size() - r)});
        }
      }
    }
    for (int64_t c = 0; c < columns[o]; c += kColumnsPerTask) {
      expand.push_back({o, 0, c, std::min(c + kColumnsPerTask, columns[o]), 0, 0});
    }
  }
  std::vector<float> t(static_cast<size_t>(t_size));
  pool.RunTasks(static_cast<int>(shrink.size()), [&](int index) {
    const Task& task = shrink[static_cast<size_t>(index)];
    const LoraRows& group = outputs[task.output].groups[task.group];
    LoraShrinkRows(x, x_stride, group.rows.subspan(task.first_row, task.num_rows), k, *group.delta,
                   task.begin, task.end, t.data() + t_offset[task.output], t_stride[task.output]);
  });
  pool.RunTasks(static_cast<int>(expand.size()), [&](int index) {
    const Task& task = expand[static_cast<size_t>(index)];
    const LoraOutput& output = outputs[task.output];
    for (const LoraRows& group : output.groups) {
      LoraExpandRows(t.data() + t_offset[task.output], t_stride[task.output], group.rows,
                     *group.delta, task.begin, task.end, output.y, output.y_stride);
    }
  });
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, const Tensor& w, float eps,
             float weight_offset, float* y) {
  INFER_CHECK(rows >= 0 && dim > 0, "RmsNorm: rows = {}, dim = {}", rows, dim);
  CheckFloatVector("RmsNorm", "weight", w, dim);
  if (rows == 0) return;
  INFER_CHECK(x != nullptr && y != nullptr, "RmsNorm: null x or y");
  INFER_DISPATCH(RmsNorm, x, rows, dim, w.dtype(), w.raw(), eps, weight_offset, y);
}

void Rope(float* x, int64_t num_tokens, int64_t num_heads, int64_t head_dim, int64_t token_stride,
          const float* cos, const float* sin) {
  INFER_CHECK(num_tokens >= 0 && num_heads >= 0, "Rope: num_tokens = {}, num_heads = {}",
              num_tokens, num_heads);
  INFER_CHECK(head_dim > 0 && head_dim % 2 == 0, "Rope: head_dim {} is not a positive even number",
              head_dim);
  INFER_CHECK(token_stride >= num_heads * head_dim,
              "Rope: token_stride {} < num_heads * head_dim {}", token_stride,
              num_heads * head_dim);
  if (num_tokens == 0 || num_heads == 0) return;
  INFER_CHECK(x != nullptr && cos != nullptr && sin != nullptr, "Rope: null x, cos or sin");
  INFER_DISPATCH(Rope, x, num_tokens, num_heads, head_dim, token_stride, cos, sin);
}

void PagedAttention(const float* q, std::span<const AttentionSequence> seqs, const PagedKvLayer& kv,
                    const AttentionParams& params, float* out, ThreadPool& pool) {
  INFER_CHECK(params.num_heads > 0 && params.num_kv_heads > 0 &&
                  params.num_heads % params.num_kv_heads == 0,
              "PagedAttention: num_heads {} is not a positive multiple of num_kv_heads {}",
              params.num_heads, params.num_kv_heads);
  INFER_CHECK(params.head_dim > 0, "PagedAttention: head_dim = {}", params.head_dim);
  INFER_CHECK(params.sliding_window >= 0, "PagedAttention: sliding_window = {}",
              params.sliding_window);
  INFER_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kBF16,
              "PagedAttention: KV dtype {} (expected f32 or bf16)", DTypeName(kv.dtype));
  INFER_CHECK(kv.block_size > 0 && kv.block_size % kPagedBlockMultiple == 0,
              "PagedAttention: block_size {} is not a positive multiple of {}", kv.block_size,
              kPagedBlockMultiple);
  INFER_CHECK(kv.head_stride >= kv.block_size * params.head_dim &&
                  kv.block_stride >= kv.head_stride * params.num_kv_heads,
              "PagedAttention: strides (block {}, head {}) cannot hold {} kv heads x {} positions "
              "x head_dim {}",
              kv.block_stride, kv.head_stride, params.num_kv_heads, kv.block_size, params.head_dim);
  int64_t rows = 0;
  for (const AttentionSequence& seq : seqs) {
    INFER_CHECK(seq.num_tokens >= 0 && seq.first_pos >= 0 && seq.row >= 0,
                "PagedAttention: num_tokens = {}, first_pos = {}, row = {}", seq.num_tokens,
                seq.first_pos, seq.row);
    INFER_CHECK(seq.num_blocks * kv.block_size >= seq.first_pos + seq.num_tokens &&
                    (seq.block_table != nullptr || seq.num_blocks == 0),
                "PagedAttention: {} blocks of {} cannot hold {} positions", seq.num_blocks,
                kv.block_size, seq.first_pos + seq.num_tokens);
    rows += seq.num_tokens;
  }
  if (rows == 0) return;
  INFER_CHECK(q != nullptr && kv.k != nullptr && kv.v != nullptr && out != nullptr,
              "PagedAttention: null q, cache or out");
  INFER_DISPATCH(PagedAttention, q, seqs, kv, params, out, pool);
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  INFER_CHECK(n >= 0, "SiluMul: n = {}", n);
  if (n == 0) return;
  INFER_DISPATCH(SiluMul, gate, up, out, n);
}

void GeluTanhMul(const float* gate, const float* up, float* out, int64_t n) {
  INFER_CHECK(n >= 0, "GeluTanhMul: n = {}", n);
  if (n == 0) return;
  INFER_DISPATCH(GeluTanhMul, gate, up, out, n);
}

double ExpShifted(const float* x, int64_t n, float shift, double* out) {
  INFER_CHECK(n >= 0, "ExpShifted: n = {}", n);
  if (n == 0) return 0.0;
  INFER_DISPATCH(ExpShifted, x, n, shift, out);
  return cpu::reference::ExpShifted(x, n, shift, out);  // not reached: the switch is exhaustive
}

RowExtremes Extremes(const float* x, int64_t n) {
  INFER_CHECK(n >= 0, "Extremes: n = {}", n);
  INFER_DISPATCH(Extremes, x, n);
  return cpu::reference::Extremes(x, n);  // not reached: the switch is exhaustive
}

void Add(float* x, const float* y, int64_t n) {
  INFER_CHECK(n >= 0, "Add: n = {}", n);
  if (n == 0) return;
  INFER_DISPATCH(Add, x, y, n);
}

void Embed(const PackedMatrix& table, const int32_t* ids, int64_t num_tokens, float scale,
           float* out) {
  INFER_CHECK(table.defined(), "Embed: table is not packed");
  INFER_CHECK(num_tokens >= 0, "Embed: num_tokens = {}", num_tokens);
  const int64_t vocab = table.rows();
  const int64_t dim = table.cols();
  for (int64_t t = 0; t < num_tokens; ++t) {
    INFER_CHECK(ids[t] >= 0 && ids[t] < vocab,
                "Embed: token id {} at {} is outside the vocabulary [0, {})", ids[t], t, vocab);
    // A row of the packed table is strided (two values per step); a few thousand values per
    // token, so plain loads.
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = table.At(ids[t], i) * scale;
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  INFER_CHECK(n >= 0, "SoftCap: n = {}", n);
  INFER_CHECK(cap > 0.0F, "SoftCap: cap {} is not positive", cap);
  if (n == 0) return;
  INFER_DISPATCH(SoftCap, x, n, cap);
}

}  // namespace infer::kernels
