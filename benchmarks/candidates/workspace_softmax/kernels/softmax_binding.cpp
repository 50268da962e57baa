// The entry point model_new.py calls: cuda_extension.softmax_forward(x, y, rows, cols[, stream]).
#include "binding_registry.h"

int softmax_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

REGISTER_BINDING(int, softmax_forward, (const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream)) {
    return softmax_launch(x, y, rows, cols, stream);
}
