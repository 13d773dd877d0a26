"""crf_lr's heads, losses and optimizer for Keras 3 (TensorFlow, JAX or PyTorch backend).

Written only against ``keras`` and ``keras.ops``: no tf-keras, no bert4keras, no direct
TensorFlow. Same names, arguments and configs as the tf-keras modules; every class and loss is
registered for ``.keras`` files (package ``crf_lr``), so ``keras.saving.load_model`` needs no
``custom_objects``.

    >>> from crf_lr.keras3 import ConditionalRandomField, LayerwiseAdam
    >>> crf = ConditionalRandomField(lr_multiplier=100, name='CRF')
"""
import os
import sys

# crf_lr/__init__.py selects tf-keras for the Keras 2 side; undo that before Keras 3 (and, on the
# TensorFlow backend, TensorFlow) loads, so that this side never pulls tf-keras in.
if 'tensorflow' not in sys.modules:
    os.environ.pop('TF_USE_LEGACY_KERAS', None)

from crf_lr.keras3.crf import (ConditionalRandomField, ConditionalRandomFieldLoss,
                               crf_log_likelihood, crf_log_partition, crf_marginals,
                               crf_sequence_score,
                               crf_dense_accuracy, crf_sparse_accuracy, viterbi_decode_ops)
from crf_lr.keras3.global_pointer import (EfficientGlobalPointer, GlobalPointer,
                                          rotary_position_embedding)
from crf_lr.keras3.losses import (global_pointer_crossentropy, global_pointer_f1,
                                  multilabel_categorical_crossentropy,
                                  sparse_global_pointer_crossentropy, sparse_global_pointer_f1,
                                  sparse_multilabel_categorical_crossentropy)
from crf_lr.keras3.optimizers import LayerwiseAdam, match_multiplier

__all__ = ['ConditionalRandomField', 'ConditionalRandomFieldLoss', 'EfficientGlobalPointer',
           'GlobalPointer', 'LayerwiseAdam', 'crf_log_likelihood', 'crf_log_partition',
           'crf_marginals',
           'crf_sequence_score', 'crf_dense_accuracy', 'crf_sparse_accuracy',
           'global_pointer_crossentropy',
           'global_pointer_f1', 'match_multiplier', 'multilabel_categorical_crossentropy',
           'rotary_position_embedding', 'sparse_global_pointer_crossentropy',
           'sparse_global_pointer_f1', 'sparse_multilabel_categorical_crossentropy',
           'viterbi_decode_ops']
