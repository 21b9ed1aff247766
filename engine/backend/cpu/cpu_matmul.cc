#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/fp8_scale.h"

#include "engine/backend/cpu/cpu_kernels.h"

namespace llm::cpu {
namespace {

// 8 independent partial sums let the compiler keep one vector register of lanes per output.
// Built twice (AVX2+FMA and baseline) and picked at load time, so the binary runs on any x86-64.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void Dot4x4(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, int rows, int cols,
            float out[4][4]) {
  constexpr int kLanes = 8;
  float acc[4][4][kLanes] = {};
  const int64_t k_main = k / kLanes * kLanes;
  for (int64_t kk = 0; kk < k_main; kk += kLanes) {
    for (int i = 0; i < 4; ++i) {
      if (i >= rows) break;
      const float* xr = x + i * ldx + kk;
      for (int j = 0; j < 4; ++j) {
        if (j >= cols) break;
        const float* wr = w + j * ldw + kk;
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] += xr[l] * wr[l];
      }
    }
  }
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += acc[i][j][l];
      for (int64_t kk = k_main; kk < k; ++kk) s += x[i * ldx + kk] * w[j * ldw + kk];
      out[i][j] = s;
    }
  }
}


// Tiles of 4 rows x 4 output columns; parallel over column tiles (each weight row is read by one
// thread: decode is bound by reading W once) and, for tall x, over row tiles too. `rows(j0, cols,
// thread)` returns the weight rows j0 .. j0 + cols - 1 as float32, [cols, k].
template <typename WeightRows>
void MatmulTiles(ThreadPool& pool, const float* x, const float* bias, float* y, int64_t m, int64_t n, int64_t k,
                 const WeightRows& rows) {
  const int64_t col_tiles = (n + 3) / 4;
  const int64_t row_tiles = (m + 3) / 4;
  // A block of row tiles per task keeps W's tile in cache while x streams.
  constexpr int64_t kRowTilesPerTask = 16;
  const int64_t row_tasks = (row_tiles + kRowTilesPerTask - 1) / kRowTilesPerTask;
  pool.ParallelFor(col_tiles * row_tasks, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t ct = task % col_tiles;
      const int64_t rt0 = (task / col_tiles) * kRowTilesPerTask;
      const int64_t j0 = ct * 4;
      const int cols = static_cast<int>(std::min<int64_t>(4, n - j0));
      const float* w = rows(j0, cols, thread);
      for (int64_t rt = rt0; rt < std::min(row_tiles, rt0 + kRowTilesPerTask); ++rt) {
        const int64_t i0 = rt * 4;
        const int tile_rows = static_cast<int>(std::min<int64_t>(4, m - i0));
        float out[4][4];
        Dot4x4(x + i0 * k, k, w, k, k, tile_rows, cols, out);
        for (int i = 0; i < tile_rows; ++i)
          for (int j = 0; j < cols; ++j) y[(i0 + i) * n + j0 + j] = out[i][j] + (bias ? bias[j0 + j] : 0.0f);
      }
    }
  });
}

}  // namespace

void Matmul(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t m,
            int64_t n, int64_t k) {
  MatmulTiles(pool, x, bias, y, m, n, k, [&](int64_t j0, int, int) { return w + j0 * k; });
}

void MatmulFp8(ThreadPool& pool, const float* x, const uint8_t* w, const float* scale, const ScaleGrid& grid,
               const float* bias, float* y, int64_t m, int64_t n, int64_t k) {
  // One dequantized 4-row tile per thread, reused across the task's row tiles.
  std::vector<std::vector<float>> tiles(pool.num_threads(), std::vector<float>(4 * k));
  MatmulTiles(pool, x, bias, y, m, n, k, [&](int64_t j0, int cols, int thread) {
    float* tile = tiles[thread].data();
    for (int j = 0; j < cols; ++j) {
      const int64_t row = j0 + j;
      const uint8_t* src = w + row * k;
      float* dst = tile + j * k;
      for (int64_t c0 = 0; c0 < k; c0 += grid.cols_per) {
        const float s = scale[grid.Index(row, c0)];
        const int64_t c1 = std::min(k, c0 + grid.cols_per);
        for (int64_t c = c0; c < c1; ++c) dst[c] = Fp8E4M3ToFloat(src[c]) * s;
      }
    }
    return static_cast<const float*>(tile);
  });
}

void MatmulInt4(ThreadPool& pool, const float* x, const Int4View& w, const float* bias, float* y, int64_t m) {
  std::vector<std::vector<float>> tiles(pool.num_threads(), std::vector<float>(4 * w.kp));
  MatmulTiles(pool, x, bias, y, m, w.n, w.kp, [&](int64_t j0, int cols, int thread) {
    float* tile = tiles[thread].data();
    for (int j = 0; j < cols; ++j) DequantizeInt4StorageRow(w, j0 + j, tile + j * w.kp);
    return static_cast<const float*>(tile);
  });
}

void GatherInt4Input(ThreadPool& pool, const float* x, const int32_t* perm, int64_t m, int64_t k, int64_t kp,
                     float* out) {
  pool.ParallelFor(m, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t j = 0; j < kp; ++j) out[r * kp + j] = perm[j] >= 0 ? x[r * k + perm[j]] : 0.0f;
  });
}

namespace {

float AmaxScale(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t c = 0; c < n; ++c) amax = std::max(amax, std::abs(x[c]));
  return Fp8ScaleForAmax(amax);
}

}  // namespace

void FakeQuantizeFp8(ThreadPool& pool, const float* x, float* out, int64_t rows, int64_t cols, ActivationQuant quant,
                     int32_t group, float static_scale) {
  const int64_t span = quant == ActivationQuant::kDynamicPerGroup && group > 0 ? group : cols;
  pool.ParallelFor(rows, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c0 = 0; c0 < cols; c0 += span) {
        const int64_t c1 = std::min(cols, c0 + span);
        const float* xs = x + r * cols;
        const float s = quant == ActivationQuant::kStaticPerTensor ? static_scale : AmaxScale(xs + c0, c1 - c0);
        for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = Fp8E4M3ToFloat(FloatToFp8E4M3(xs[c] / s)) * s;
      }
    }
  });
}

void QuantizeFp8Rows(ThreadPool& pool, const float* x, uint8_t* codes, float* scales, int64_t rows, int64_t cols,
                     ActivationQuant quant, float static_scale) {
  pool.ParallelFor(rows, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * cols;
      float s = static_scale;
      if (quant != ActivationQuant::kStaticPerTensor) scales[r] = s = AmaxScale(xr, cols);
      for (int64_t c = 0; c < cols; ++c) codes[r * cols + c] = FloatToFp8E4M3(xr[c] / s);
    }
  });
}

void DequantizeFp8Rows(ThreadPool& pool, const uint8_t* codes, const float* scales, float* out, int64_t rows,
                       int64_t cols, ActivationQuant quant, float static_scale) {
  pool.ParallelFor(rows, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float s = quant == ActivationQuant::kStaticPerTensor ? static_scale : scales[r];
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = Fp8E4M3ToFloat(codes[r * cols + c]) * s;
    }
  });
}

}  // namespace llm::cpu
