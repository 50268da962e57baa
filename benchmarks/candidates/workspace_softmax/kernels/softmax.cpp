// The cpu backend's twin of softmax.cu: rows over OpenMP threads, max / sum (double) / scale per row.
#include <cmath>
#include <cstdint>

#include "binding_registry.h"

int softmax_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* out = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = row[c] > m ? row[c] : m;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            out[c] = std::exp(row[c] - m);
            s += out[c];
        }
        const float inv = static_cast<float>(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) out[c] *= inv;
    }
    return 0;
}
