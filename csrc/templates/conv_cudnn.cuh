// Template: cuDNN convolution and transposed convolution (fp32, FMA math: no TF32) followed by the
// epilogue in one pass (CUDA).
//
// cg_conv_cudnn: same contract as conv.cuh's cg_conv (y[index] = E(conv(x, w)[index], index), contiguous
// NC(D)(H)(W) fp32, any stride, padding, dilation and groups; a conv bias is an epilogue operand), by
// cudnnConvolutionForward. cg_conv_transpose_cudnn: same contract as cg_conv_transpose (weight
// [c, oc/groups, kd, kh, kw]; output_padding is in the output extents), by cudnnConvolutionBackwardData,
// the transposed convolution being the data gradient of the convolution from y's shape to x's.
// Each uses the fastest FMA-math algorithm cuDNN's Find measures for the shape (for the transposed
// one, not FFT, and Winograd only for kernels up to 3; once per process and call site), then an elementwise pass applies E in place (skipped when the epilogue is the identity).
//
// cuDNN is reached through the library PyTorch has already loaded (dlopen of libcudnn.so.9, then
// libcudnn.so), with the few entry points this template needs declared here, so the candidate builds
// without cuDNN's headers and links nothing extra. cuDNN runs on the caller's stream; its workspace is
// one device buffer per process, grown when a shape needs more.
//
// Knobs: EPI_BLOCK (threads of the epilogue pass) in {128, 256, 512, 1024}.
// Returns 0, a CUDA error code, 20000 + a cuDNN status, or 29999 when cuDNN cannot be loaded or no
// FMA-math algorithm runs the shape. cg_cudnn_or(rc, fallback) runs `fallback` (the template kernel)
// when rc says cuDNN refused the shape, so a candidate stays correct where cuDNN has no algorithm.
#pragma once
#include "common.h"
#include <dlfcn.h>

namespace cg_cudnn {
typedef void* Handle;
typedef void* Desc;
struct FwdAlgoPerf {  // cudnnConvolutionFwdAlgoPerf_t
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math_type;
    int reserved[3];
};
enum { DATA_FLOAT = 0, TENSOR_NCHW = 0, CROSS_CORRELATION = 1, FMA_MATH = 3, STATUS_SUCCESS = 0, UNAVAILABLE = 29999 };

struct Api {
    int (*create)(Handle*);
    int (*set_stream)(Handle, cudaStream_t);
    int (*create_tensor)(Desc*);
    int (*set_tensor_nd)(Desc, int, int, const int*, const int*);
    int (*create_filter)(Desc*);
    int (*set_filter_nd)(Desc, int, int, int, const int*);
    int (*create_conv)(Desc*);
    int (*set_conv_nd)(Desc, int, const int*, const int*, const int*, int, int);
    int (*set_group_count)(Desc, int);
    int (*set_math_type)(Desc, int);
    int (*find_fwd)(Handle, Desc, Desc, Desc, Desc, int, int*, FwdAlgoPerf*);
    int (*forward)(Handle, const void*, Desc, const void*, Desc, const void*, Desc, int, void*, size_t, const void*,
                   Desc, void*);
    int (*find_bwd_data)(Handle, Desc, Desc, Desc, Desc, int, int*, FwdAlgoPerf*);  // same perf layout
    int (*backward_data)(Handle, const void*, Desc, const void*, Desc, const void*, Desc, int, void*, size_t,
                         const void*, Desc, void*);
    bool ok;
};

template <class F>
static bool load_symbol(void* lib, const char* name, F* out) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    return *out != nullptr;
}

static const Api& api() {
    static Api a = [] {
        Api r{};
        void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
        if (lib == nullptr) lib = dlopen("libcudnn.so.9", RTLD_NOW);
        if (lib == nullptr) lib = dlopen("libcudnn.so", RTLD_NOW);
        r.ok = lib != nullptr && load_symbol(lib, "cudnnCreate", &r.create) &&
               load_symbol(lib, "cudnnSetStream", &r.set_stream) &&
               load_symbol(lib, "cudnnCreateTensorDescriptor", &r.create_tensor) &&
               load_symbol(lib, "cudnnSetTensorNdDescriptor", &r.set_tensor_nd) &&
               load_symbol(lib, "cudnnCreateFilterDescriptor", &r.create_filter) &&
               load_symbol(lib, "cudnnSetFilterNdDescriptor", &r.set_filter_nd) &&
               load_symbol(lib, "cudnnCreateConvolutionDescriptor", &r.create_conv) &&
               load_symbol(lib, "cudnnSetConvolutionNdDescriptor", &r.set_conv_nd) &&
               load_symbol(lib, "cudnnSetConvolutionGroupCount", &r.set_group_count) &&
               load_symbol(lib, "cudnnSetConvolutionMathType", &r.set_math_type) &&
               load_symbol(lib, "cudnnFindConvolutionForwardAlgorithm", &r.find_fwd) &&
               load_symbol(lib, "cudnnConvolutionForward", &r.forward) &&
               load_symbol(lib, "cudnnFindConvolutionBackwardDataAlgorithm", &r.find_bwd_data) &&
               load_symbol(lib, "cudnnConvolutionBackwardData", &r.backward_data);
        return r;
    }();
    return a;
}

// One prepared convolution: descriptors and the chosen algorithm for a shape (a template instance is
// one call site, so one shape; the shape is checked on every call all the same).
struct Plan {
    bool ready = false;
    int refused = 0;  // the cuDNN status (+ 20000) that refused `shape`, so it is not asked again
    CgConvShape shape{};
    Desc x = nullptr, w = nullptr, y = nullptr, conv = nullptr;
    int algo = 0;
    size_t workspace = 0;
};

static bool same_shape(const CgConvShape& a, const CgConvShape& b) {
    const int64_t* p = &a.n;
    const int64_t* q = &b.n;
    for (size_t i = 0; i < sizeof(CgConvShape) / sizeof(int64_t); ++i)
        if (p[i] != q[i]) return false;
    return true;
}

static void* workspace(size_t bytes, int* err) {
    static void* buffer = nullptr;
    static size_t size = 0;
    if (bytes > size) {
        if (buffer != nullptr) cudaFree(buffer);
        buffer = nullptr;
        size = 0;
        cudaError_t e = cudaMalloc(&buffer, bytes);
        if (e != cudaSuccess) {
            *err = (int)e;
            return nullptr;
        }
        size = bytes;
    }
    return buffer;
}

#define CG_CUDNN_TRY(call)                       \
    do {                                         \
        int status_ = (call);                    \
        if (status_ != STATUS_SUCCESS) return 20000 + status_; \
    } while (0)

static int prepare(Plan& p, Handle h, const CgConvShape& s, bool transposed) {
    const Api& a = api();
    // 1-D and 2-D convolutions pass extent 1 for the missing axes: describe them as 4-D (2 spatial axes),
    // 3-D ones as 5-D.
    const bool three = s.d != 1 || s.kd != 1 || s.od != 1;
    const int nd = three ? 5 : 4, sp = nd - 2;
    const int64_t in_sp[3] = {s.d, s.h, s.w}, out_sp[3] = {s.od, s.oh, s.ow}, k_sp[3] = {s.kd, s.kh, s.kw};
    const int64_t pad[3] = {s.pd, s.ph, s.pw}, stride[3] = {s.sd, s.sh, s.sw}, dil[3] = {s.dd, s.dh, s.dw};
    const int off = three ? 0 : 1;
    int xd[5], yd[5], wd[5], xs[5], ys[5], pa[3], st[3], di[3];
    xd[0] = (int)s.n; xd[1] = (int)s.c;
    yd[0] = (int)s.n; yd[1] = (int)s.oc;
    // The filter as the forward convolution sees it: [out, in / groups, k...]; for the transposed one
    // that forward convolution maps y's shape to x's, so its weight [c, oc / groups, k...] is that filter.
    wd[0] = transposed ? (int)s.c : (int)s.oc;
    wd[1] = transposed ? (int)(s.oc / s.groups) : (int)(s.c / s.groups);
    for (int i = 0; i < sp; ++i) {
        xd[2 + i] = (int)in_sp[off + i];
        yd[2 + i] = (int)out_sp[off + i];
        wd[2 + i] = (int)k_sp[off + i];
        pa[i] = (int)pad[off + i];
        st[i] = (int)stride[off + i];
        di[i] = (int)dil[off + i];
    }
    xs[nd - 1] = 1;
    ys[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; --i) {
        xs[i] = xs[i + 1] * xd[i + 1];
        ys[i] = ys[i + 1] * yd[i + 1];
    }
    if (p.x == nullptr) {
        CG_CUDNN_TRY(a.create_tensor(&p.x));
        CG_CUDNN_TRY(a.create_tensor(&p.y));
        CG_CUDNN_TRY(a.create_filter(&p.w));
        CG_CUDNN_TRY(a.create_conv(&p.conv));
    }
    CG_CUDNN_TRY(a.set_tensor_nd(p.x, DATA_FLOAT, nd, xd, xs));
    CG_CUDNN_TRY(a.set_tensor_nd(p.y, DATA_FLOAT, nd, yd, ys));
    CG_CUDNN_TRY(a.set_filter_nd(p.w, DATA_FLOAT, TENSOR_NCHW, nd, wd));
    CG_CUDNN_TRY(a.set_conv_nd(p.conv, sp, pa, st, di, CROSS_CORRELATION, DATA_FLOAT));
    CG_CUDNN_TRY(a.set_group_count(p.conv, (int)s.groups));
    CG_CUDNN_TRY(a.set_math_type(p.conv, FMA_MATH));
    FwdAlgoPerf perf[16];
    int returned = 0;
    if (transposed)
        CG_CUDNN_TRY(a.find_bwd_data(h, p.w, p.x, p.conv, p.y, 16, &returned, perf));
    else
        CG_CUDNN_TRY(a.find_fwd(h, p.x, p.w, p.conv, p.y, 16, &returned, perf));
    for (int i = 0; i < returned; ++i) {  // sorted fastest first
        // Transposed: never the FFT data-gradient algorithms (2, 3), and Winograd (4, 5) only for kernels
        // of at most 3 per axis. A transform's fp32 error grows with its size: KernelBench L2/11's 5x5
        // transposed convolution got relative error 5e-4 (past the fp32 policy's 5e-5) with all of them
        // allowed and with FFT alone excluded, while the 3x3 ones passed and ran 1.1-1.2x faster than
        // with the direct-summation algorithms (0, 1) alone, which halved L2/10 and L2/19 (H200,
        // sessions 10 and 11). Every forward convolution passed with every algorithm allowed.
        const bool small_kernel = s.kd <= 3 && s.kh <= 3 && s.kw <= 3;
        const bool imprecise = transposed && (perf[i].algo == 2 || perf[i].algo == 3 || (perf[i].algo >= 4 && !small_kernel));
        if (perf[i].status == STATUS_SUCCESS && perf[i].math_type == FMA_MATH && !imprecise) {
            p.algo = perf[i].algo;
            p.workspace = perf[i].memory;
            p.shape = s;
            p.ready = true;
            return 0;
        }
    }
    return UNAVAILABLE;
}
}  // namespace cg_cudnn

static cg_cudnn::Handle cg_cudnn_handle() {
    static cg_cudnn::Handle handle = nullptr;
    if (handle == nullptr && cg_cudnn::api().ok && cg_cudnn::api().create(&handle) != cg_cudnn::STATUS_SUCCESS)
        handle = nullptr;
    return handle;
}

template <int EPI_BLOCK, bool IDENTITY_EPILOGUE, bool TRANSPOSED, class E>
int cg_cudnn_conv_run(const float* x, const float* w, float* y, const CgConvShape& s, const E& e, cudaStream_t stream) {
    using namespace cg_cudnn;
    if (s.n <= 0 || s.oc <= 0 || s.od * s.oh * s.ow <= 0) return 0;
    if (!api().ok) return UNAVAILABLE;
    Handle h = cg_cudnn_handle();
    if (h == nullptr) return UNAVAILABLE;
    CG_CUDNN_TRY(api().set_stream(h, stream));
    static Plan plan;  // one per template instance, i.e. per call site
    if (!plan.ready || !same_shape(plan.shape, s)) {
        if (plan.refused != 0 && same_shape(plan.shape, s)) return plan.refused;
        plan.ready = false;
        plan.refused = 0;
        int err = prepare(plan, h, s, TRANSPOSED);
        if (err != 0) {
            if (err >= 20000) {  // cuDNN said no for this shape: the caller's fallback runs from now on
                plan.shape = s;
                plan.refused = err;
            }
            return err;
        }
    }
    int err = 0;
    void* ws = plan.workspace ? workspace(plan.workspace, &err) : nullptr;
    if (err != 0) return err;
    const float alpha = 1.f, beta = 0.f;
    if (TRANSPOSED)
        CG_CUDNN_TRY(api().backward_data(h, &alpha, plan.w, w, plan.x, x, plan.conv, plan.algo, ws, plan.workspace,
                                         &beta, plan.y, y));
    else
        CG_CUDNN_TRY(api().forward(h, &alpha, plan.x, x, plan.w, w, plan.conv, plan.algo, ws, plan.workspace, &beta,
                                   plan.y, y));
    if (!IDENTITY_EPILOGUE) cg_epilogue_in_place<EPI_BLOCK>(y, s.n * s.oc * s.od * s.oh * s.ow, e, stream);
    return (int)cudaGetLastError();
}

template <int EPI_BLOCK, bool IDENTITY_EPILOGUE, class E>
int cg_conv_cudnn(const float* x, const float* w, float* y, const CgConvShape& s, const E& e, cudaStream_t stream) {
    return cg_cudnn_conv_run<EPI_BLOCK, IDENTITY_EPILOGUE, false>(x, w, y, s, e, stream);
}

template <int EPI_BLOCK, bool IDENTITY_EPILOGUE, class E>
int cg_conv_transpose_cudnn(const float* x, const float* w, float* y, const CgConvShape& s, const E& e,
                            cudaStream_t stream) {
    return cg_cudnn_conv_run<EPI_BLOCK, IDENTITY_EPILOGUE, true>(x, w, y, s, e, stream);
}

template <class F>
int cg_cudnn_or(int rc, F fallback) {
    return rc >= 20000 ? fallback() : rc;
}
