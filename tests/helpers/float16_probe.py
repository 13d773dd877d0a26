"""The mixed-precision probe of the GlobalPointer heads, shared by the tf-keras test
(tests/model/test_bad_inputs.py) and the Keras 3 one (tests/keras3/keras3_backend_checks.py):
activations x 300 make span logits of ~2e5, past float16's 65504; the oracle is the same layer in
float32.

    >>> x = large_activations()
    >>> assert_float32_scores_equal(mixed(x), float32_twin(x))
"""
import numpy as np


def large_activations():
    """Inputs ``(2, 5, 16)`` whose span logits overflow float16."""
    return np.random.default_rng(0).normal(size=(2, 5, 16)).astype('float32') * 300


def assert_float32_scores_equal(scores, expected):
    """``scores`` (the mixed-precision layer's) are float32, NaN-free, finite exactly where the
    float32 layer's ``expected`` are (masked cells -inf) and equal them; ``expected`` must
    overflow float16, or the probe proves nothing."""
    scores, expected = np.asarray(scores), np.asarray(expected)
    real = np.isfinite(expected)
    assert np.abs(expected[real]).max() > 65504
    assert scores.dtype == np.float32 and not np.isnan(scores).any()
    assert (np.isfinite(scores) == real).all()
    np.testing.assert_allclose(scores[real], expected[real], rtol=0,
                               atol=5e-3 * np.abs(expected[real]).max())
