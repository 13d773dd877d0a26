"""Training precision: float32, or Keras's ``mixed_bfloat16`` where the CPU computes bf16 natively.

``set_precision`` sets Keras's global mixed-precision policy, which layers read when they are
built, so call it before building the model. Under ``mixed_bfloat16`` the encoder's matrix
products run in bfloat16 (8 bits of mantissa) while every weight stays float32; the heads of
this library compute their losses and decoding scores in float32 (the CRF in float64), so only
the activations lose precision.

When it pays: only on a CPU with native bf16 matrix instructions (``avx512_bf16`` or
``amx_bf16`` among the ``/proc/cpuinfo`` flags), where oneDNN runs bf16 products faster than
float32 ones; elsewhere bf16 is emulated and a step is slower than in float32. Arm's bf16
(``bf16`` among an Arm CPU's ``Features``, Neoverse V1 on) is native too, but neither its speed
nor its accuracy is measured, so ``'auto'`` keeps float32 there and says so. Even then it needs
enough tokens per step (batch x n) for the matrix products to outweigh the casts and the float32
parts of the step (layer norm, softmax, the optimizer). Measured figures, with their commands:
docs/performance.md, "bf16: the step against float32 and its limit".

A model saved with ``model.save('model.h5')`` records the policy of every layer; plain
``keras.models.load_model`` rebuilds it in the precision it was trained in. :func:`load_model`
rebuilds it in the current one instead (the weights are float32 either way). :func:`save_model`
writes float32 weights also from a model loaded for prediction (bf16 encoder weights), and
:func:`load_model` widens the bf16 weights of a file an older crf_lr wrote so.

    >>> print(set_precision('auto'))          # before building (or loading) the model
    >>> model = build_model(...)              # its output (our heads) stays float32
"""
import contextlib
import json
import os
import tempfile

import numpy as np

from crf_lr.utils.atomic import atomic_path
from crf_lr.compat import keras

PRECISIONS = ('float32', 'mixed_bfloat16', 'auto')
ENCODER_LAYERS = ('Embedding', 'PositionEmbedding', 'SinusoidalPositionEmbedding',
                  'RelativePositionEmbedding', 'RelativePositionEmbeddingT5', 'LayerNormalization',
                  'ScaleOffset', 'MultiHeadAttention', 'GatedAttentionUnit', 'FeedForward')
NATIVE_BF16_FLAGS = ('amx_bf16', 'avx512_bf16')


def cpu_flags(cpuinfo='/proc/cpuinfo'):
    """The set of CPU flags that ``cpuinfo`` (a Linux ``/proc/cpuinfo``-format file) lists: x86's
    ``flags`` lines, Arm's ``Features``; empty where the file cannot be read.

        >>> 'avx512f' in cpu_flags()
        True
    """
    try:
        with open(cpuinfo, encoding='utf-8', errors='replace') as f:
            return {flag for line in f if line.startswith(('flags', 'Features'))
                    for flag in line.partition(':')[2].split()}
    except OSError:
        return set()


def native_bf16(cpuinfo='/proc/cpuinfo'):
    """The CPU flags of native bf16 matrix arithmetic that ``cpuinfo`` lists (empty: none).

    Args:
        cpuinfo: path of a Linux ``/proc/cpuinfo``-format file; a missing file reads as no flags.
    Returns:
        tuple of str, a subset of ``NATIVE_BF16_FLAGS`` (``('amx_bf16', 'avx512_bf16')``).

        >>> native_bf16()
        ('avx512_bf16',)
    """
    flags = cpu_flags(cpuinfo)
    return tuple(flag for flag in NATIVE_BF16_FLAGS if flag in flags)


def set_precision(precision, cpuinfo='/proc/cpuinfo'):
    """Set Keras's global mixed-precision policy for the models built from now on.

    Args:
        precision: 'float32'; 'mixed_bfloat16' (bf16 products, float32 weights and heads); or
            'auto' (the scripts' default): 'mixed_bfloat16' if :func:`native_bf16` finds a
            native flag, else 'float32'.
        cpuinfo: the file 'auto' reads (see :func:`native_bf16`).
    Returns:
        str, one line saying the policy chosen and why (for the scripts to print).
    Raises:
        ValueError naming the argument when ``precision`` is not one of ``PRECISIONS``.

        >>> set_precision('auto')
        'precision: auto -> mixed_bfloat16 (avx512_bf16 in /proc/cpuinfo)'
    """
    if precision not in PRECISIONS:
        raise ValueError(f'set_precision: precision must be one of {PRECISIONS}, '
                         f'got {precision!r}')
    line = f'precision: {precision} (as requested)'
    if precision == 'auto':
        flags = native_bf16(cpuinfo)
        precision = 'mixed_bfloat16' if flags else 'float32'
        line = f'precision: auto -> {precision} ({_auto_reason(flags, cpuinfo)})'
    keras.mixed_precision.set_global_policy(precision)
    return line


def _auto_reason(flags, cpuinfo):
    """Why ``'auto'`` chose as it did, given the :func:`native_bf16` ``flags`` of ``cpuinfo``."""
    if flags:
        return f'{"/".join(flags)} in {cpuinfo}'
    if 'bf16' in cpu_flags(cpuinfo):
        return (f"Arm's bf16 in {cpuinfo}, whose speed and accuracy are not measured: "
                f'--precision mixed_bfloat16 to try it')
    return f'no {"/".join(NATIVE_BF16_FLAGS)} in {cpuinfo}: bf16 would be emulated'


def policy_name():
    """The name of Keras's global policy now: the precision models built now compute in
    ('float32' or 'mixed_bfloat16'), what ``'auto'`` became.

        >>> set_precision('auto'); policy_name()
        'mixed_bfloat16'
    """
    return keras.mixed_precision.global_policy().name


def _policy_name(dtype):
    """The policy name of a layer config's ``dtype`` entry (a str or a serialised Policy)."""
    return dtype['config']['name'] if isinstance(dtype, dict) else dtype


def load_model(path, custom_objects=None, inference_only=False):
    """A model saved by ``model.save(path)`` (HDF5), rebuilt to compute in the current precision.

    The layers built under the model's own policy (the one most of its layers have: the global
    policy when it was built) take the current global policy; layers given another dtype on
    purpose keep it (a float32 head in a bf16 model), and so do the inputs. In a model saved
    under float32 a deliberate float32 layer cannot be told apart and takes the new policy too.
    A file holding bf16 weights (a model loaded for prediction, saved by crf_lr before
    :func:`save_model`) loads as :func:`save_model` now writes it: its weights widened to float32.
    Not compiled.

    Args:
        path: the ``.h5`` file.
        custom_objects: as in ``keras.models.load_model`` (crf_lr's and bert4keras's layers are
            registered already).
        inference_only: under a mixed policy (``mixed_bfloat16``), the encoder's layers
            (bert4keras's, ``ENCODER_LAYERS``) keep their weights in the compute dtype: each is
            rounded to bf16 once, here, instead of at every call, so the outputs are the same
            and prediction casts no encoder weight (half their memory). The heads keep float32
            weights (the CRF's transitions are read in float64 to decode). Such a model is for
            prediction: training it would update bf16 weights. No effect under ``float32``.
    Returns:
        the ``keras.Model`` with the saved weights.
    Raises:
        ValueError naming ``path`` when the file holds weights only (no model configuration).

        >>> set_precision('float32')
        >>> model = load_model('runs/ner/model/model.h5')      # trained under mixed_bfloat16
    """
    import h5py
    with h5py.File(path, 'r') as f:
        config, rounded = _model_config(f), _holds_bf16(f)
    if config is None:
        raise ValueError(f'{path}: no model configuration (saved with save_weights?); build the '
                         f'model and call load_weights instead')
    if rounded:          # a model loaded for prediction and saved by crf_lr before save_model
        with tempfile.TemporaryDirectory() as scratch:
            widened = os.path.join(scratch, os.path.basename(path))
            _write_float32(path, widened)
            return load_model(widened, custom_objects, inference_only)
    layers = [layer for layer in config['config']['layers'] if layer['class_name'] != 'InputLayer']
    names = [_policy_name(layer['config'].get('dtype')) for layer in layers]
    saved = max(set(names), key=names.count)
    current = keras.mixed_precision.global_policy()
    encoder = current.compute_dtype if inference_only else current.name
    for layer, name in zip(layers, names):
        if name == saved:
            layer['config']['dtype'] = (encoder if layer['class_name'] in ENCODER_LAYERS
                                        else current.name)
    with _global_policy(encoder):         # the Dense layers the encoder's layers build inside
        model = keras.models.model_from_config(config, custom_objects=custom_objects)
        model.load_weights(path)
    return model


def save_model(model, path):
    """``model.save(path)`` (HDF5, without the optimizer), always with float32 weights.

    A model loaded with :func:`load_model`'s ``inference_only`` under ``mixed_bfloat16`` holds
    its encoder's weights in bf16 and its encoder's layers under the ``bfloat16`` policy; saved
    as it is, its file holds bf16 weights that Keras cannot load. Its file is rewritten here
    (atomically: :func:`crf_lr.utils.atomic.atomic_path`) with the weights widened to float32 (the
    bf16 values exactly: what it predicts with) and the encoder's layers back under
    ``mixed_bfloat16``, as if it had been trained so. Any other model is saved as it is.

        >>> save_model(load_model('runs/ner/model/model.h5', inference_only=True), 'copy.h5')
    """
    import h5py
    model.save(path, include_optimizer=False)
    with h5py.File(path, 'r') as f:
        rounded = _holds_bf16(f)
    if rounded:
        with atomic_path(path) as widened:
            _write_float32(path, widened)


def _model_config(h5file):
    """The model configuration (a dict) of the open Keras HDF5 file ``h5file``; None if none."""
    config = h5file.attrs.get('model_config')
    if config is None:
        return None
    return json.loads(config.decode('utf-8') if isinstance(config, bytes) else config)


def _is_bf16(item):
    """Whether an HDF5 ``item`` is a dataset of bfloat16 numbers (h5py reads them as 2-byte
    opaque values)."""
    return getattr(item, 'dtype', None) is not None and item.dtype.kind == 'V' \
        and item.dtype.itemsize == 2


def _holds_bf16(h5file):
    """Whether the open Keras HDF5 model file ``h5file`` holds any bfloat16 weight."""
    return h5file.visititems(lambda _, item: _is_bf16(item) or None) is not None


def _float32(values):
    """bfloat16 ``values`` (2-byte opaque, as h5py reads them) as float32: a bfloat16 is the top
    half of the float32 it rounds, so widening is exact."""
    return (values.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _write_float32(source, target):
    """Copy the Keras HDF5 model file ``source`` to ``target``: its bf16 weights widened to
    float32, and the layers its configuration puts under the ``bfloat16`` policy (an encoder
    loaded for prediction) back under ``mixed_bfloat16``; attributes as they were."""
    import h5py

    def copy(name, item):
        if isinstance(item, h5py.Dataset):
            new.create_dataset(name, data=_float32(item[()]) if _is_bf16(item) else item[()])
        else:
            new.require_group(name)
        new[name].attrs.update(item.attrs)

    with h5py.File(source, 'r') as old, h5py.File(target, 'w') as new:
        new.attrs.update(old.attrs)
        old.visititems(copy)
        config = _model_config(old)
        for layer in config['config']['layers']:
            if _policy_name(layer['config'].get('dtype')) == 'bfloat16':
                layer['config']['dtype'] = 'mixed_bfloat16'
        new.attrs['model_config'] = json.dumps(config)


@contextlib.contextmanager
def _global_policy(name):
    """Keras's global mixed-precision policy set to ``name`` within the block."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
