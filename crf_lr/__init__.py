"""crf_lr: sequence labelling on BERT-family encoders, in the style of bert4keras.

Importing the package sets ``TF_KERAS=1`` and ``TF_USE_LEGACY_KERAS=1`` before TensorFlow loads
(bert4keras needs both: either alone breaks it); unless set, oneDNN's
``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to 8,192 (``crf_lr.speed.primitive_cache``; the server keeps
oneDNN's 1,024) and, in a container whose CPU quota leaves fewer cores
than the CPUs it may run on, TensorFlow's thread pools to the quota's cores
(``crf_lr.speed.threads``); makes ``keras.models.load_model`` find every crf_lr
layer, loss, metric, optimizer and schedule (``crf_lr.model.autoregister``); and exposes the public
layers, losses and optimizer lazily, so that ``crf_lr.evaluation.metrics`` or ``crf_lr.tagging``
load without TensorFlow.

    >>> import crf_lr                                  # before anything imports TensorFlow
    >>> crf = crf_lr.ConditionalRandomField(lr_multiplier=100)
"""
import importlib
import os
import sys
import warnings

from crf_lr.model import autoregister as _autoregister
from crf_lr.speed import primitive_cache as _primitive_cache
from crf_lr.speed import threads as _threads

__version__ = '0.1.0'
ONEDNN_PRIMITIVE_CACHE_CAPACITY = _primitive_cache.TRAINING_CAPACITY    # what importing sets


def keras3_came_first():
    """True where TensorFlow was imported with Keras 3 before crf_lr (no ``TF_USE_LEGACY_KERAS=1``):
    :mod:`crf_lr.keras3` works then, the tf-keras side (:mod:`crf_lr.compat`) cannot."""
    keras_module = sys.modules.get('keras')
    return ('tensorflow' in sys.modules and os.environ.get('TF_USE_LEGACY_KERAS') != '1'
            and keras_module is not None
            and getattr(keras_module, '__version__', '2').split('.')[0] == '3')


def _set_up_environment():
    """Select tf-keras (Keras 2) for TensorFlow and bert4keras; nothing where Keras 3 came first
    (too late for TensorFlow's settings: :mod:`crf_lr.compat` says so if the Keras 2 side is
    imported)."""
    if keras3_came_first():
        return
    os.environ['TF_KERAS'] = '1'
    os.environ['TF_USE_LEGACY_KERAS'] = '1'
    _primitive_cache.size_for_training()      # 8,192 kernels per process, unless set
    try:                              # a CPU quota's cores, not the host's (read when TF starts)
        _threads.size_thread_pools()
    except Exception as error:        # noqa: BLE001  (an unforeseen /proc must not stop the import)
        warnings.warn(f'crf_lr: the CPU quota could not be read ({error!r}); TensorFlow sizes its '
                      f'thread pools by the CPUs')


_set_up_environment()
_autoregister.install()       # keras.models.load_model finds every crf_lr object (autoregister.py)

# Public name -> module that defines it; loaded on first access (PEP 562).
_PUBLIC = {
    'ConditionalRandomField': 'crf_lr.model.crf',
    'crf_log_likelihood': 'crf_lr.model.crf',
    'crf_log_partition': 'crf_lr.model.crf',
    'crf_marginals': 'crf_lr.model.crf',
    'GlobalPointer': 'crf_lr.model.global_pointer',
    'EfficientGlobalPointer': 'crf_lr.model.global_pointer',
    'viterbi_decode': 'crf_lr.decoding.viterbi',
    'viterbi_decode_tf': 'crf_lr.decoding.viterbi',
    'set_precision': 'crf_lr.model.precision',
    'decode_spans': 'crf_lr.decoding.spans',
    'dense_targets': 'crf_lr.decoding.spans',
    'sparse_targets': 'crf_lr.decoding.spans',
    'multilabel_categorical_crossentropy': 'crf_lr.model.losses',
    'sparse_multilabel_categorical_crossentropy': 'crf_lr.model.losses',
    'global_pointer_crossentropy': 'crf_lr.model.losses',
    'sparse_global_pointer_crossentropy': 'crf_lr.model.losses',
    'global_pointer_f1': 'crf_lr.model.losses',
    'sparse_global_pointer_f1': 'crf_lr.model.losses',
    'LayerwiseAdam': 'crf_lr.training.optimizers',
    'Adam': 'crf_lr.training.optimizers',
    'extend_with_layerwise_lr': 'crf_lr.training.optimizers',
    'extend_with_weight_decay': 'crf_lr.training.optimizers',
    'WarmupLinearDecay': 'crf_lr.training.optimizers',
    'layerwise_decay_multipliers': 'crf_lr.training.optimizers',
    'set_check_numerics': 'crf_lr.model.numerics',
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
