"""Probe: bert4keras's ``LayerNormalization`` (statistics in the compute dtype, five separate ops)
(with TensorFlow's gradient of each op, not :mod:`crf_lr.speed.layer_norm`'s closed form) against a
layer norm with float32 statistics in one ``fused_batch_norm`` (the trick tf-keras's own
``LayerNormalization`` uses), in the whole training step of the CRF head (4-layer ALBERT-tiny
shape, batch 32, n = 128), float32 and mixed_bfloat16, timed in interleaved rounds. Not used by
the library: the switch is a per-layer flag set here only (docs/performance.md, issue 29).

    $ python benchmarks/layer_norm_probe.py --rounds 5     # one JSON line, then a summary
"""
import argparse
import json
import os
import sys

import numpy as np

import crf_lr  # noqa: F401  (environment before TensorFlow)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
import models  # noqa: E402
from timing import interleaved, ratio_summary  # noqa: E402


def fused_layer_norm(layer_class, scale_offset_class):
    """``layer_class.call`` replaced by one that, on layers flagged ``_fused``, normalises with
    float32 statistics in one fused op, then applies the layer's own scale and offset."""
    from crf_lr.compat import tf
    original = layer_class.call

    def call(self, inputs):
        if (not getattr(self, '_fused', False) or self.conditional
                or not (self.zero_mean and self.unit_variance)):
            return original(self, inputs)
        shape = tf.shape(inputs)
        x = tf.reshape(tf.cast(inputs, tf.float32), [1, -1, shape[-1], 1])
        ones = tf.ones(tf.shape(x)[1:2], tf.float32)
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(x, ones, tf.zeros_like(ones),
                                                   epsilon=self.epsilon, data_format='NCHW')
        return scale_offset_class.call(self, tf.cast(tf.reshape(y, shape), inputs.dtype))
    layer_class.call = call


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    import bert4keras.layers as layers
    from crf_lr.compat import keras, tf
    from crf_lr.speed.layer_norm import closed_form_layer_norm
    fused_layer_norm(layers.LayerNormalization, layers.ScaleOffset)
    data = models.random_batch(np.random.default_rng(0), 32, 128)
    calls, first_loss = {}, {}
    for precision in ('float32', 'mixed_bfloat16'):
        for fused in (False, True):
            head_model = models.build_head_in(tf, keras, 'CRF (crf_lr)', 4, precision)
            for layer in head_model.model.layers:
                if isinstance(layer, layers.LayerNormalization):
                    layer._fused = fused
            step = models.train_step(tf, head_model)
            arguments = models.step_arguments(tf, head_model, data)
            name = f'{precision} {"fused" if fused else "bert4keras"}'
            with closed_form_layer_norm(False):       # traced here: bert4keras's own gradient
                first_loss[name] = float(step(*arguments).numpy())
            calls[name] = lambda s=step, a=arguments: s(*a).numpy()
    timings = interleaved(calls, rounds=args.rounds, warmup=1)
    ratios = {p: ratio_summary(timings, f'{p} bert4keras', f'{p} fused')
              for p in ('float32', 'mixed_bfloat16')}
    print(json.dumps(dict(first_loss=first_loss, ratios_bert4keras_over_fused=ratios,
                          timings={k: {m: v[m] for m in ('median_ms', 'min_ms', 'max_ms',
                                                         'load_before', 'load_after')}
                                   for k, v in timings.items()})))


if __name__ == '__main__':
    main()
