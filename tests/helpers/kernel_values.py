"""The fused kernels' row sums on fixed inputs, to compare one build with another bit for bit;
run as a module, the same for the build that ``$CRF_LR_MARCH`` and ``$CRF_LR_CACHE`` name, then
the ``kernel_values`` tests against it (tests/speed/test_isa_levels.py runs it so).

    $ CRF_LR_MARCH=x86-64-v2 CRF_LR_CACHE=/tmp/v2 PYTHONPATH=tests \\
          python -m helpers.kernel_values /tmp/v2.npz -q -m kernel_values tests/speed
"""
import sys

import numpy as np


def row_sum_outputs(ops):
    """{name: float32 array}: the softmax's gradient and the layer norm's outputs and gradients
    (each sums rows) in float32 and bfloat16, on inputs whose rows are longer than a vector and
    not a multiple of its lanes."""
    from crf_lr.compat import tf
    rng = np.random.default_rng(0)
    outputs = {}
    for dtype in (tf.float32, tf.bfloat16):
        def tensor(shape, spread=1.0, shift=0.0):
            return tf.cast(rng.normal(size=shape).astype(np.float32) * spread + shift, dtype)
        y = tf.nn.softmax(tensor((2, 3, 37, 131), spread=3.0))
        dy = tensor((2, 3, 37, 131))
        x, dx = tensor((77, 389), 5.0, 2.0), tensor((77, 389))
        gamma, beta = tensor(389), tensor(389)
        normed, mean, std = ops.crf_lr_layer_norm(x, gamma, beta, epsilon=1e-12)
        d_x, d_gamma, d_beta = ops.crf_lr_layer_norm_grad(dx, x, gamma, mean, std)
        found = dict(softmax_grad=ops.crf_lr_softmax_grad(dy, y, scale=0.125),
                     layer_norm=normed, mean=mean, std=std, d_x=d_x, d_gamma=d_gamma,
                     d_beta=d_beta)
        outputs.update({f'{name} {dtype.name}': tf.cast(value, tf.float32).numpy()
                        for name, value in found.items()})
    return outputs


def main():
    """``python -m helpers.kernel_values OUT.npz PYTEST_ARGS...``: :func:`row_sum_outputs` of
    this process's build into OUT.npz, then pytest with PYTEST_ARGS (its exit status)."""
    import pytest
    from crf_lr.speed import fused_kernels
    out, *pytest_args = sys.argv[1:]
    ops = fused_kernels._ops()
    if ops is None:
        sys.exit(fused_kernels.status())
    np.savez(out, **row_sum_outputs(ops))
    sys.exit(pytest.main(pytest_args))


if __name__ == '__main__':
    main()
