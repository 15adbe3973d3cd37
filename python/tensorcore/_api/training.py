"""Training kernels (include/tensorcore/training.h): RMSNorm and LayerNorm
forward/backward, RoPE, SwiGLU, softmax, AdamW and normalisation fused with a
GEMV.

Tensors are packed row-major Buffers. `dtype` ("f16", "bf16", "f32"; default
"f16" as in the original binding) is the type of the activations, their
gradients and the weights gamma/beta/W; rstd, mean, dgamma and dbeta are
always float32. Optional outputs (rstd_out, mean_out, dgamma, dbeta) and beta
may be None. Weight gradients are overwritten, not accumulated. Which outputs
may be the same buffer as an input (e.g. Y is X, in place) is listed per
function; any other overlap is refused (TC_ERR_INVALID_ARG).
"""

from ctypes import byref, c_double, c_int32, c_int64

from .._args import f64, flag, i64
from .._constants import dtype_code
from .._optable import Op
from .._objects import buffer_arg, context_arg, context_method
from .._structs import _Struct

__all__ = ["TCRopeDesc", "TCAdamwDesc",
           "rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward",
           "rope_forward", "rope_backward", "swiglu_forward", "swiglu_backward", "geglu_forward", "geglu_backward",
           "softmax_forward", "softmax_backward", "adamw_step", "fused_rmsnorm_gemv", "fused_layernorm_gemv"]


class TCRopeDesc(_Struct):
    """tc_rope_desc: X is [batch, heads, seq, head_dim]; interleaved 0 = half rotation."""
    _c_name_ = "struct tc_rope_desc"
    _fields_ = [
        ("batch", c_int64),
        ("heads", c_int64),
        ("seq", c_int64),
        ("head_dim", c_int64),
        ("dtype", c_int32),
        ("interleaved", c_int32),
    ]


class TCAdamwDesc(_Struct):
    """tc_adamw_desc: hyper-parameters of one AdamW step."""
    _c_name_ = "struct tc_adamw_desc"
    _fields_ = [
        ("n", c_int64),
        ("grad_dtype", c_int32),
        ("lr", c_double),
        ("beta1", c_double),
        ("beta2", c_double),
        ("eps", c_double),
        ("weight_decay", c_double),
        ("bias_correction1", c_double),
        ("bias_correction2", c_double),
    ]


_rmsnorm_forward = Op("tc_rmsnorm_forward")
_rmsnorm_backward = Op("tc_rmsnorm_backward")
_layernorm_forward = Op("tc_layernorm_forward")
_layernorm_backward = Op("tc_layernorm_backward")
_rope_forward = Op("tc_rope_forward", TCRopeDesc)
_rope_backward = Op("tc_rope_backward", TCRopeDesc)
_swiglu_forward = Op("tc_swiglu_forward")
_swiglu_backward = Op("tc_swiglu_backward")
_geglu_forward = Op("tc_geglu_forward")
_geglu_backward = Op("tc_geglu_backward")
_softmax_forward = Op("tc_softmax_forward")
_softmax_backward = Op("tc_softmax_backward")
_adamw_step = Op("tc_adamw_step", TCAdamwDesc)
_fused_rmsnorm_gemv = Op("tc_fused_rmsnorm_gemv")
_fused_layernorm_gemv = Op("tc_fused_layernorm_gemv")


def _bufs(fn, **named):
    """Raw handles (None for None) of the Buffer arguments, in order."""
    return [buffer_arg(b, fn, name) for name, b in named.items()]


def _held(**named):
    return [b for b in named.values() if b is not None]


def _eps(eps, fn):
    # The library refuses NaN, inf and negative eps; a float too large for
    # f32 becomes inf on the way and is refused too.
    return f64(eps, fn, "eps")


# ---- RMSNorm / LayerNorm -----------------------------------------------------------

@context_method
def rmsnorm_forward(ctx, X, gamma, Y, rstd_out, N, D, eps=1e-5, dtype="f16", *, stream=None):
    """Y = X * rstd * gamma per row of D, rstd = 1/sqrt(mean(X^2) + eps).
    X, Y [N, D] and gamma [D] in dtype; rstd_out [N] f32 or None. Y may be X."""
    fn = "tc_rmsnorm_forward"
    _rmsnorm_forward(stream, context_arg(ctx, fn), *_bufs(fn, X=X, gamma=gamma, Y=Y, rstd_out=rstd_out),
                     i64(N, fn, "N"), i64(D, fn, "D"), _eps(eps, fn), dtype_code(dtype), keep=(X, gamma, Y, rstd_out))


@context_method
def rmsnorm_backward(ctx, X, gamma, dY, rstd, dX, dgamma, N, D, dtype="f16", *, stream=None):
    """dX (and dgamma [D] f32, unless None) from X, gamma, dY and the forward
    pass's rstd [N] f32. dX may be X or dY."""
    fn = "tc_rmsnorm_backward"
    _rmsnorm_backward(stream, context_arg(ctx, fn),
                      *_bufs(fn, X=X, gamma=gamma, dY=dY, rstd=rstd, dX=dX, dgamma=dgamma),
                      i64(N, fn, "N"), i64(D, fn, "D"), dtype_code(dtype), keep=(X, gamma, dY, rstd, dX, dgamma))


@context_method
def layernorm_forward(ctx, X, gamma, beta, Y, mean_out, rstd_out, N, D, eps=1e-5, dtype="f16", *, stream=None):
    """Y = (X - mean) * rstd * gamma + beta per row of D (biased variance).
    beta, mean_out and rstd_out may be None. Y may be X."""
    fn = "tc_layernorm_forward"
    _layernorm_forward(stream, context_arg(ctx, fn),
                       *_bufs(fn, X=X, gamma=gamma, beta=beta, Y=Y, mean_out=mean_out, rstd_out=rstd_out),
                       i64(N, fn, "N"), i64(D, fn, "D"), _eps(eps, fn), dtype_code(dtype),
                       keep=(X, gamma, beta, Y, mean_out, rstd_out))


@context_method
def layernorm_backward(ctx, X, gamma, dY, mean, rstd, dX, N, D, dgamma=None, dbeta=None, dtype="f16", *, stream=None):
    """dX, and dgamma / dbeta [D] f32 when given, from the forward pass's mean
    and rstd [N] f32. dX may be X or dY."""
    fn = "tc_layernorm_backward"
    _layernorm_backward(stream, context_arg(ctx, fn),
                        *_bufs(fn, X=X, gamma=gamma, dY=dY, mean=mean, rstd=rstd, dX=dX, dgamma=dgamma,
                               dbeta=dbeta),
                        i64(N, fn, "N"), i64(D, fn, "D"), dtype_code(dtype),
                        keep=(X, gamma, dY, mean, rstd, dX, dgamma, dbeta))


# ---- RoPE ----------------------------------------------------------------------------

def _rope_desc(fn, batch, heads, seq, head_dim, dtype, interleaved):
    return TCRopeDesc(batch=i64(batch, fn, "batch"), heads=i64(heads, fn, "heads"), seq=i64(seq, fn, "seq"),
                      head_dim=i64(head_dim, fn, "head_dim"), dtype=dtype_code(dtype),
                      interleaved=flag(interleaved))


@context_method
def rope_forward(ctx, X, cos_t, sin_t, batch, heads, seq, head_dim, dtype="f16", interleaved=False, *, stream=None):
    """Rotary embedding in place on X [batch, heads, seq, head_dim] with f32
    tables cos_t, sin_t [seq, head_dim / 2]. interleaved=False rotates
    element k with k + head_dim/2 (GPT-NeoX / HF); True rotates pairs
    (2k, 2k + 1) (GGUF / Meta LLaMA)."""
    fn = "tc_rope_forward"
    d = _rope_desc(fn, batch, heads, seq, head_dim, dtype, interleaved)
    _rope_forward(stream, context_arg(ctx, fn), *_bufs(fn, X=X, cos_t=cos_t, sin_t=sin_t), byref(d),
    keep=(X, cos_t, sin_t))


@context_method
def rope_backward(ctx, dX, cos_t, sin_t, batch, heads, seq, head_dim, dtype="f16", interleaved=False, *, stream=None):
    """The inverse rotation applied in place to the gradient dX."""
    fn = "tc_rope_backward"
    d = _rope_desc(fn, batch, heads, seq, head_dim, dtype, interleaved)
    _rope_backward(stream, context_arg(ctx, fn), *_bufs(fn, dX=dX, cos_t=cos_t, sin_t=sin_t), byref(d),
    keep=(dX, cos_t, sin_t))


# ---- SwiGLU / softmax -------------------------------------------------------------------

@context_method
def swiglu_forward(ctx, gate, up, out, n, dtype="f16", *, stream=None):
    """out = silu(gate) * up on n elements. out may be gate or up."""
    fn = "tc_swiglu_forward"
    _swiglu_forward(stream, context_arg(ctx, fn), *_bufs(fn, gate=gate, up=up, out=out), i64(n, fn, "n"),
                    dtype_code(dtype), keep=(gate, up, out))


@context_method
def swiglu_backward(ctx, gate, up, dout, dgate, dup, n, dtype="f16", *, stream=None):
    """dgate and dup from gate, up and dout. Each may be an input, not each other."""
    fn = "tc_swiglu_backward"
    _swiglu_backward(stream, context_arg(ctx, fn), *_bufs(fn, gate=gate, up=up, dout=dout, dgate=dgate, dup=dup),
                     i64(n, fn, "n"), dtype_code(dtype), keep=(gate, up, dout, dgate, dup))


@context_method
def geglu_forward(ctx, gate, up, out, n, dtype="f16", *, stream=None):
    """out = gelu_tanh(gate) * up on n elements (Gemma's feed-forward). out may be gate or up."""
    fn = "tc_geglu_forward"
    _geglu_forward(stream, context_arg(ctx, fn), *_bufs(fn, gate=gate, up=up, out=out), i64(n, fn, "n"),
                   dtype_code(dtype), keep=(gate, up, out))


@context_method
def geglu_backward(ctx, gate, up, dout, dgate, dup, n, dtype="f16", *, stream=None):
    """dgate and dup of GEGLU from gate, up and dout. Each may be an input, not each other."""
    fn = "tc_geglu_backward"
    _geglu_backward(stream, context_arg(ctx, fn), *_bufs(fn, gate=gate, up=up, dout=dout, dgate=dgate, dup=dup),
                    i64(n, fn, "n"), dtype_code(dtype), keep=(gate, up, dout, dgate, dup))


@context_method
def softmax_forward(ctx, X, Y, N, D, dtype="f16", *, stream=None):
    """Y = softmax over the last dimension D of N rows (max-shifted). Y may be X."""
    fn = "tc_softmax_forward"
    _softmax_forward(stream, context_arg(ctx, fn), *_bufs(fn, X=X, Y=Y), i64(N, fn, "N"), i64(D, fn, "D"),
                     dtype_code(dtype), keep=(X, Y))


@context_method
def softmax_backward(ctx, Y, dY, dX, N, D, dtype="f16", *, stream=None):
    """dX = Y * (dY - sum(dY * Y)) per row. dX may be Y or dY."""
    fn = "tc_softmax_backward"
    _softmax_backward(stream, context_arg(ctx, fn), *_bufs(fn, Y=Y, dY=dY, dX=dX), i64(N, fn, "N"),
                      i64(D, fn, "D"), dtype_code(dtype), keep=(Y, dY, dX))


# ---- AdamW -------------------------------------------------------------------------------

@context_method
def adamw_step(ctx, params_fp32, m_fp32, v_fp32, grads, grad_dtype, n, lr, beta1, beta2, eps, weight_decay,
               bias_correction1, bias_correction2, *, stream=None):
    """One AdamW step on n f32 parameters (decoupled weight decay); grads in
    grad_dtype ("f32", "f16", "bf16"); bias corrections are 1 - beta^t."""
    fn = "tc_adamw_step"
    d = TCAdamwDesc(n=i64(n, fn, "n"), grad_dtype=dtype_code(grad_dtype, "grad_dtype"),
                    lr=f64(lr, fn, "lr"), beta1=f64(beta1, fn, "beta1"), beta2=f64(beta2, fn, "beta2"),
                    eps=f64(eps, fn, "eps"), weight_decay=f64(weight_decay, fn, "weight_decay"),
                    bias_correction1=f64(bias_correction1, fn, "bias_correction1"),
                    bias_correction2=f64(bias_correction2, fn, "bias_correction2"))
    _adamw_step(stream, context_arg(ctx, fn), *_bufs(fn, params=params_fp32, m=m_fp32, v=v_fp32, grads=grads),
                byref(d), keep=(params_fp32, m_fp32, v_fp32, grads))


# ---- fused normalisation + GEMV -------------------------------------------------------------

@context_method
def fused_rmsnorm_gemv(ctx, X, gamma, W, Y, M, N, K, eps=1e-5, dtype="f16", *, stream=None):
    """Y[M, N] = rmsnorm(X[M, K]; gamma) @ W[N, K]^T in one pass over W."""
    fn = "tc_fused_rmsnorm_gemv"
    _fused_rmsnorm_gemv(stream, context_arg(ctx, fn), *_bufs(fn, X=X, gamma=gamma, W=W, Y=Y), i64(M, fn, "M"),
                        i64(N, fn, "N"), i64(K, fn, "K"), _eps(eps, fn), dtype_code(dtype), keep=(X, gamma, W, Y))


@context_method
def fused_layernorm_gemv(ctx, X, gamma, beta, W, Y, M, N, K, eps=1e-5, dtype="f16", *, stream=None):
    """Y[M, N] = layernorm(X[M, K]; gamma, beta) @ W[N, K]^T in one pass over W (beta may be None)."""
    fn = "tc_fused_layernorm_gemv"
    _fused_layernorm_gemv(stream, context_arg(ctx, fn), *_bufs(fn, X=X, gamma=gamma, beta=beta, W=W, Y=Y),
                          i64(M, fn, "M"), i64(N, fn, "N"), i64(K, fn, "K"), _eps(eps, fn),
                          dtype_code(dtype), keep=(X, gamma, beta, W, Y))
