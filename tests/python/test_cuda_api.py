"""CUDA management calls: consistent in every build."""

import pytest

import tensorcore as tc


def test_counts_and_errors_agree(cpu_ctx):
    n = tc.cuda_device_count()
    assert n >= 0
    assert tc.cuda_is_active(cpu_ctx) is False
    with pytest.raises(tc.TensorcoreError) as e:
        tc.cuda_device_at(n)
    assert e.value.status == tc.TC_ERR_NO_DEVICE
    if n == 0:
        with pytest.raises(tc.TensorcoreError) as e:
            cpu_ctx.cuda_init()
        assert e.value.status == tc.TC_ERR_NO_DEVICE
        assert tc.cuda_last_kernel_name() == ""
    else:
        info = tc.cuda_device_at(0)
        assert info.backend == tc.TC_BACKEND_CUDA and info.name


@pytest.mark.skipif(tc.cuda_device_count() == 0, reason="no CUDA device")
def test_cpu_context_moves_to_cuda():
    with tc.Context("cpu") as ctx:
        ctx.cuda_init()
        assert ctx.cuda_is_active()
        assert ctx.device_info().backend == tc.TC_BACKEND_CUDA
