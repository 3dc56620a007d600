// Matrix multiplication on ember: the problem a launch carries and the gemm
// loops that mm, addmm, bmm (EmberBlas.cpp) and convolution
// (EmberConvolution.cpp) run inside ember::launch (EmberLaunch.h).
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "aten/EmberLaunch.h"

// ember-book: begin blas_launch
namespace ember::blas {

// A matrix (or a batch of them) as the loops see it: a pointer and strides
// in elements. Any strides work: transposed, sliced, broadcast (stride 0).
template <typename T>
struct Matrix {
  T* data = nullptr;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
  T* batch(int64_t b) const { return data + b * batch_stride; }
};

// C = beta * S + alpha * A @ B for `batches` problems of m x n (inner k).
// C's rows must be contiguous (col_stride 1); S may be absent (data null).
template <typename T>
struct Gemm {
  int64_t batches = 1, m = 0, n = 0, k = 0;
  Matrix<const T> a, b, s;
  Matrix<T> c;
  T alpha = T(1), beta = T(0);
};

// A problem runs inside ember::launch (kernel_launch), which hands the body
// the kernel offset: the same problem with every pointer translated for the
// running kernel (an absent S stays null).
template <typename T>
Gemm<T> atOffset(Gemm<T> p, ptrdiff_t offset) {
  p.a.data = ember::atOffset(p.a.data, offset);
  p.b.data = ember::atOffset(p.b.data, offset);
  p.s.data = ember::atOffset(p.s.data, offset);
  p.c.data = ember::atOffset(p.c.data, offset);
  return p;
}

} // namespace ember::blas
// ember-book: end blas_launch

// ember-book: begin blas_gemm
namespace ember::blas {

// The loops below are the hot code: compiled with -O3 even where the rest
// of the build is not (the book compiles without optimization), like the
// elementwise rows. They use raw pointers only: GCC does not inline code
// compiled without optimization (std::vector's operator[]) into them.
#pragma GCC push_options
#pragma GCC optimize("O3")

// Blocking: a kKBlock x kNBlock panel of B is copied into a contiguous
// buffer and reused for every row; a kRows x kCols tile of C stays in
// registers over a panel's k loop. kCols: 32 bytes of T, a loop GCC turns
// into vector instructions without -march flags.
constexpr int64_t kKBlock = 128;
constexpr int64_t kNBlock = 256;
constexpr int64_t kRows = 4;
template <typename T>
constexpr int64_t kCols = 32 / sizeof(T);

// Fully unrolled, the accumulators stay in (vector) registers: about twice
// as fast as the same loops left rolled.
template <typename T>
void tile(int64_t kb, const T* __restrict a, const T* __restrict b,
          int64_t ldb, T* __restrict c, int64_t ldc) {
  T acc[kRows][kCols<T>] = {};
  for (int64_t kk = 0; kk < kb; ++kk) {
#pragma GCC unroll 4
    for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
      for (int64_t u = 0; u < kCols<T>; ++u) {
        acc[r][u] += a[kk * kRows + r] * b[kk * ldb + u];
      }
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t u = 0; u < kCols<T>; ++u) {
      c[r * ldc + u] += acc[r][u];
    }
  }
}

// Rows [row_begin, row_end) of batch `bi`. Pointers already translated.
// The two small buffers are the worker's scratch (a GPU's shared memory).
template <typename T>
void gemmRows(const Gemm<T>& p, int64_t bi, int64_t row_begin,
              int64_t row_end) {
  const T* a = p.a.batch(bi);
  const T* b = p.b.batch(bi);
  const T* s = p.s.data == nullptr ? nullptr : p.s.batch(bi);
  T* c = p.c.batch(bi);
  std::vector<T> b_buffer(kKBlock * kNBlock), a_buffer(kKBlock * kRows);
  T* b_panel = b_buffer.data();
  T* a_panel = a_buffer.data();
  for (int64_t j0 = 0; j0 < p.n; j0 += kNBlock) {
    const int64_t nb = std::min(kNBlock, p.n - j0);
    for (int64_t i = row_begin; i < row_end; ++i) {
      T* crow = c + i * p.c.row_stride + j0;
      for (int64_t j = 0; j < nb; ++j) {
        crow[j] = s == nullptr ? T(0)
            : p.beta * s[i * p.s.row_stride + (j0 + j) * p.s.col_stride];
      }
    }
    for (int64_t k0 = 0; k0 < p.k; k0 += kKBlock) {
      const int64_t kb = std::min(kKBlock, p.k - k0);
      for (int64_t kk = 0; kk < kb; ++kk) {
        const T* brow = b + (k0 + kk) * p.b.row_stride + j0 * p.b.col_stride;
        for (int64_t j = 0; j < nb; ++j) {
          b_panel[kk * nb + j] = brow[j * p.b.col_stride];
        }
      }
      for (int64_t i = row_begin; i < row_end; i += kRows) {
        const int64_t rows = std::min(kRows, row_end - i);
        // A's rows i.. for this panel, times alpha, zero-padded to kRows.
        for (int64_t kk = 0; kk < kb; ++kk) {
          const T* acol = a + i * p.a.row_stride + (k0 + kk) * p.a.col_stride;
          for (int64_t r = 0; r < kRows; ++r) {
            a_panel[kk * kRows + r] =
                r < rows ? p.alpha * acol[r * p.a.row_stride] : T(0);
          }
        }
        T* crow = c + i * p.c.row_stride + j0;
        int64_t j = 0;
        if (rows == kRows) {
          for (; j + kCols<T> <= nb; j += kCols<T>) {
            tile(kb, a_panel, b_panel + j, nb, crow + j,
                 p.c.row_stride);
          }
        }
        for (int64_t r = 0; r < rows; ++r) { // leftover rows and columns
          for (int64_t jj = j; jj < nb; ++jj) {
            T sum = T(0);
            for (int64_t kk = 0; kk < kb; ++kk) {
              sum += a_panel[kk * kRows + r] * b_panel[kk * nb + jj];
            }
            crow[r * p.c.row_stride + jj] += sum;
          }
        }
      }
    }
  }
}

// All batches and rows, split over the intra-op threads. Inside another
// parallel_for (convolution's loop over images) it runs on the caller.
template <typename T>
void gemm(const Gemm<T>& p) {
  const int64_t work_per_row = std::max<int64_t>(1, p.n * p.k);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / work_per_row);
  at::parallel_for(0, p.batches * p.m, grain, [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t bi = begin / p.m;
      const int64_t stop = std::min(end, (bi + 1) * p.m);
      gemmRows(p, bi, begin - bi * p.m, stop - bi * p.m);
      begin = stop;
    }
  });
}

} // namespace ember::blas
#pragma GCC pop_options
// ember-book: end blas_gemm
