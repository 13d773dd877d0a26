"""The fixes crf_lr applies to tf-keras and bert4keras for TF >= 2.11 (tested on TF 2.21).

Every module of crf_lr that needs TensorFlow imports it from here, so the fixes are applied
once, before any user code touches bert4keras:

    >>> from crf_lr.compat import tf, keras, K
    >>> from bert4keras.models import build_transformer_model   # now works on TF 2.21

Each ``_fix_*`` function repairs one thing and is idempotent, through its row of
:mod:`crf_lr.patches` (``python -m crf_lr.patches`` lists them). Two of them patch tf-keras for
every model of the process: ``single_batch_iterator`` (``train_on_batch`` & co.) builds its
one-batch dataset without tf.data's autotuning, and ``Dense.call`` takes the flattened form of
:func:`flat_dense`, off unless in that block. The dense layers inside bert4keras's attention
and feed-forward layers each draw their own initial values (:func:`_fix_initial_draws`).
bert4keras's attention computes with batched matrix products (:mod:`crf_lr.speed.attention`,
the same values), and its layer norms with their gradient in closed form
(:mod:`crf_lr.speed.layer_norm`, the same forward values).
"""

import crf_lr  # noqa: F401  (sets TF_KERAS / TF_USE_LEGACY_KERAS before TensorFlow loads)


import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import bert4keras.backend  # noqa: F401,E402  (points sys.modules['keras'] at tf.keras)
from bert4keras.backend import K  # noqa: E402
from crf_lr.patches import apply, swapped  # noqa: E402
from crf_lr.speed.switches import ThreadSwitch  # noqa: E402


def _fix_optimizer_base_class():
    """bert4keras optimizers subclass ``keras.optimizers.Optimizer`` but use the OptimizerV2 API
    (``_set_hyper``, ``add_slot``, ``_resource_apply_dense``), which since TF 2.11 lives at
    ``keras.optimizers.legacy.Optimizer``. Import ``bert4keras.optimizers`` while that name points
    at the legacy class, then restore the public name."""
    import sys
    if 'bert4keras.optimizers' in sys.modules:
        return
    with swapped('optimizer base class') as legacy_base:
        if legacy_base:               # else the import is left to bert4keras's own failure
            import bert4keras.optimizers  # noqa: F401


def _fix_save_weights_as_checkpoint():
    """``Transformer.save_weights_as_checkpoint`` reads eager variables inside ``tf.Graph()`` and
    uses ``tf.Session``/``tf.train.Saver``, which TF 2 no longer exports. Read the values eagerly
    first, then write them with ``tf.compat.v1`` in a fresh graph."""
    def save_weights_as_checkpoint(_original, self, filename, mapping=None, dtype=None):
        mapping = mapping or self.variable_mapping()
        mapping = {self.prefixed(k): v for k, v in mapping.items()}
        mapping = {k: v for k, v in mapping.items() if k in self.layers}
        named_values = []
        for layer, names in mapping.items():
            values = K.batch_get_value(self.layers[layer].trainable_weights)
            named_values.extend(zip(names, values))
        with tf.Graph().as_default():
            variables = [tf.compat.v1.Variable(np.asarray(value, dtype=dtype or value.dtype),
                                               name=name)
                         for name, value in named_values]
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.variables_initializer(variables))
                tf.compat.v1.train.Saver(variables).save(session, filename)

    apply('checkpoint saving', save_weights_as_checkpoint)


def _fix_feed_forward_config():
    """``FeedForward.get_config`` serialises its activations with the new Keras format, which
    the ``.h5`` loader of tf-keras cannot read back; serialise them in the legacy format."""
    def get_config(original, self):
        from tf_keras.src.saving.legacy import serialization as legacy_serialization
        config = original(self)
        config['activation'] = [legacy_serialization.serialize_keras_object(act)
                                for act in self.activation]
        return config

    apply('feed-forward config', get_config)


def _fix_initial_draws():
    """bert4keras's attention, feed-forward, gated-attention and efficient-pointer layers hand one
    kernel initializer to each of their dense layers. Keras 2.3, which bert4keras was written
    for, drew afresh at every call of an unseeded initializer; tf-keras draws the same values
    again (and warns), so a randomly initialised encoder's query, key, value and output kernels
    started equal, and a feed-forward layer's second kernel was its first reshaped. After such a
    layer's build each of its dense layers gets a copy of an unseeded initializer: draws of its
    own, reproducible under ``keras.utils.set_random_seed``. A seeded one is left shared, and so
    is one that its config cannot rebuild (a function, a subclass without ``get_config``)."""
    def build(original, self, input_shape):
        original(self, input_shape)
        shared = self.kernel_initializer
        if getattr(shared, 'seed', None) is None:
            for layer in list(vars(self).values()):
                if getattr(layer, 'kernel_initializer', None) is shared:
                    layer.kernel_initializer = _rebuilt(shared)

    apply('initial draws', build)


def _rebuilt(initializer):
    """A new ``initializer`` from its config, or ``initializer`` itself where that fails."""
    try:
        return type(initializer).from_config(initializer.get_config())
    except (AttributeError, TypeError, NotImplementedError):
        return initializer


def without_autotune(dataset):
    """``dataset`` with tf.data's autotuning off, for pipelines that have nothing to tune.

    Deleting an iterator of an autotuned dataset waits for its autotuning thread to finish its
    current period (TF 2.21), so a deletion that should take a millisecond can hold the loop for
    a sizeable part of a step; ``train_on_batch`` & co. delete one at every call, for autotuning a
    one-batch dataset has no use for (how long, today: ``python benchmarks/iterator_stall.py``,
    ``benchmarks/results/iterator_stall.json``).

        >>> iterator = iter(without_autotune(tf.data.Dataset.from_tensors(batch)))
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


class _DistributingWithoutAutotune:
    """A distribution strategy's stand-in whose ``experimental_distribute_dataset`` turns
    autotuning off first (:func:`without_autotune`)."""

    def __init__(self, strategy):
        self._strategy = strategy

    def experimental_distribute_dataset(self, dataset, *args, **kwargs):
        return self._strategy.experimental_distribute_dataset(without_autotune(dataset), *args,
                                                               **kwargs)

    def __getattr__(self, name):                 # anything else: the strategy's own
        return getattr(self._strategy, name)


def _fix_iterator_deletion_stall():
    """``train_on_batch`` / ``test_on_batch`` / ``predict_on_batch`` make one dataset iterator per
    call (tf-keras's ``single_batch_iterator``), and deleting it can stall the step that follows
    (:func:`without_autotune`); build those one-batch datasets without autotuning, which has
    nothing to tune in them."""
    def single_batch_iterator(original, strategy, *args, **kwargs):
        return original(_DistributingWithoutAutotune(strategy), *args, **kwargs)

    apply('one-batch datasets', single_batch_iterator)


_FLAT_DENSE = ThreadSwitch(default=False)     # read when a Dense layer is traced: flat_dense


def flat_dense(enabled=True):
    """Within the block, tf-keras ``Dense`` layers called on (batch, n, d) inputs multiply the
    flattened (batch x n, d) input and reshape the result back, where Keras multiplies by
    ``tensordot`` and adds the bias to the 3-D result. The same operations on the same values,
    but TensorFlow's graph optimiser then fuses the product, the bias and the activation into
    one oneDNN kernel: faster prediction, and no gain in a training step, whose gradients need
    the unfused values (``python benchmarks/graph_probe.py --change flat_dense``;
    docs/performance.md, "What each speed patch buys"). Traced
    functions keep the choice they were traced with; the setting is per thread.
    :class:`crf_lr.serving.tagger.Tagger` and ``crf_lr.serving.export`` trace prediction inside this
    block.

        >>> with flat_dense():
        ...     scores = tf.function(lambda x: model(x, training=False))(inputs)
    """
    return _FLAT_DENSE.set(enabled)


def _fix_dense_fusion():
    """Give tf-keras's ``Dense.call`` the flattened form of :func:`flat_dense` (off unless in
    that block)."""
    def call(original, self, inputs):
        if not (_FLAT_DENSE.enabled and isinstance(inputs, tf.Tensor)
                and inputs.shape.rank is not None and inputs.shape.rank > 2
                and inputs.shape[-1] is not None):
            return original(self, inputs)
        width = inputs.shape[-1]
        outputs = original(self, tf.reshape(inputs, [-1, width]))
        # the input's shape with its last entry width -> units: 4 ops per Dense where slicing
        # and joining took 13, for every Dense of a traced step (fewer ops to trace and schedule)
        last = np.zeros([inputs.shape.rank], np.int32)
        last[-1] = self.units - width
        outputs = tf.reshape(outputs, tf.shape(inputs) + last)
        outputs.set_shape(inputs.shape[:-1].concatenate([self.units]))
        return outputs

    apply('flat Dense', call)


def install():
    """Apply every fix of this module (idempotent; :mod:`crf_lr.compat` calls it on import)."""
    _fix_optimizer_base_class()
    _fix_save_weights_as_checkpoint()
    _fix_feed_forward_config()
    _fix_initial_draws()
    _fix_iterator_deletion_stall()
    _fix_dense_fusion()


__all__ = ['flat_dense', 'install', 'without_autotune']
