"""maxpool2(relu(conv3x3(x) + b)): two conv rows (implicit-GEMM register tiles) then pool+ReLU, over OpenMP."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

// 3x3 / stride 1 / pad 1 convolution as a per-row implicit GEMM: out[o, x] = bias[o] + sum_{c,kh,kw}
// w[o, c, kh, kw] * xpad[c, h+kh-1, x+kw-1]. Weights are packed once into 8-channel panels; for one output
// row the three padded input rows of every channel sit in scratch, and an 8 x 32 register tile
// (16 vector accumulators) reads its B operand straight from those rows with unaligned vector loads.
typedef float vf16 __attribute__((vector_size(64)));
constexpr int CO = 8, CX = 32;

static int64_t conv_pad_width(int64_t W) { return (W + CX - 1) / CX * CX + 2; }

// wp[(o / CO) * C*9*CO + k * CO + o % CO] = w[o, k], zero for o >= O.
static void conv_pack_weights(const float* w, float* wp, int64_t O, int64_t C) {
    const int64_t K = C * 9, Op = (O + CO - 1) / CO * CO;
    for (int64_t o = 0; o < Op; ++o)
        for (int64_t k = 0; k < K; ++k) wp[(o / CO) * K * CO + k * CO + o % CO] = o < O ? w[o * K + k] : 0.f;
}

// Output row h of image xn [C, H, W] into out[o * ostride + x] (optionally ReLU'd); pad holds C*3*Wp floats.
static void conv3x3_row(const float* xn, const float* wp, const float* bias, float* out, int64_t ostride,
                        int64_t C, int64_t O, int64_t H, int64_t W, int64_t h, float* pad, bool relu) {
    const int64_t Wp = conv_pad_width(W);
    for (int64_t c = 0; c < C; ++c)
        for (int kh = 0; kh < 3; ++kh) {
            float* dst = pad + (c * 3 + kh) * Wp;
            const int64_t r = h + kh - 1;
            for (int64_t x = 0; x < Wp; ++x)
                dst[x] = (r >= 0 && r < H && x >= 1 && x <= W) ? xn[(c * H + r) * W + x - 1] : 0.f;
        }
    for (int64_t o0 = 0; o0 < O; o0 += CO)
        for (int64_t x0 = 0; x0 < W; x0 += CX) {
            vf16 acc[CO][2] = {};
            const float* a = wp + (o0 / CO) * C * 9 * CO;
            for (int64_t ck = 0; ck < C * 3; ++ck) {
                const float* row = pad + ck * Wp + x0;
                for (int kw = 0; kw < 3; ++kw, a += CO) {
                    vf16 b0, b1;
                    std::memcpy(&b0, row + kw, 64);
                    std::memcpy(&b1, row + kw + 16, 64);
#pragma GCC unroll 8
                    for (int i = 0; i < CO; ++i) {
                        acc[i][0] += a[i] * b0;
                        acc[i][1] += a[i] * b1;
                    }
                }
            }
            const int64_t no = std::min<int64_t>(CO, O - o0), nx = std::min<int64_t>(CX, W - x0);
            for (int64_t i = 0; i < no; ++i) {
                float* o = out + (o0 + i) * ostride + x0;
                for (int h2 = 0; h2 < 2; ++h2) {
                    vf16 v = acc[i][h2] + bias[o0 + i];
                    if (relu) v = v < 0.f ? 0.f : v;
                    if (nx == CX) std::memcpy(o + 16 * h2, &v, 64);
                    else for (int64_t j = 16 * h2; j < std::min<int64_t>(nx, 16 * h2 + 16); ++j) o[j] = v[j - 16 * h2];
                }
            }
        }
}

extern "C" void cnn_block_forward(const float* x, const float* w, const float* b, float* y,
                                  int64_t N, int64_t C, int64_t O, int64_t H, int64_t W) {
    const int64_t PH = H / 2, PW = W / 2;
    std::vector<float> wp((O + CO - 1) / CO * CO * C * 9);
    conv_pack_weights(w, wp.data(), O, C);
    #pragma omp parallel
    {
        std::vector<float> pad(C * 3 * conv_pad_width(W)), rows(2 * O * W);
        #pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t ph = 0; ph < PH; ++ph) {
                for (int r = 0; r < 2; ++r)
                    conv3x3_row(x + n * C * H * W, wp.data(), b, rows.data() + r * O * W, W, C, O, H, W,
                                2 * ph + r, pad.data(), false);
                for (int64_t o = 0; o < O; ++o) {
                    const float* r0 = rows.data() + o * W;
                    const float* r1 = r0 + O * W;
                    float* out = y + ((n * O + o) * PH + ph) * PW;
                    for (int64_t q = 0; q < PW; ++q) {
                        float m = std::max(std::max(r0[2 * q], r0[2 * q + 1]), std::max(r1[2 * q], r1[2 * q + 1]));
                        out[q] = m > 0.f ? m : 0.f;  // relu commutes with max
                    }
                }
            }
    }
}
""",
    functions=["void cnn_block_forward(const float* x, const float* w, const float* b, float* y, "
               "int64_t N, int64_t C, int64_t O, int64_t H, int64_t W)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        x = x.contiguous()
        N, C, H, W = x.shape
        O = self.conv.out_channels
        y = torch.empty(N, O, H // 2, W // 2, dtype=x.dtype, device=x.device)
        _lib.cnn_block_forward(x, self.conv.weight, self.conv.bias, y, N, C, O, H, W)
        return y
