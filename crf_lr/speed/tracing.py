"""Trace a Keras step once, for batches of every size and length, without AutoGraph where the
model allows it: what the training loop (:func:`crf_lr.training.loop.train_steps`) and prediction
(:class:`crf_lr.serving.tagger.Tagger`) run.

AutoGraph rewrites the source of every layer's ``call`` before tracing it, a large part of a
step's trace, paid again in every process (docs/performance.md, "The first epoch against a
steady one"); layers need it only where Python
control flow branches on tensor values, and such a layer raises
``OperatorNotAllowedInGraphError`` while tracing without it.

    >>> signature = free_signature(batch_inputs)
    >>> step = traced_without_autograph(lambda inputs: model(inputs, training=False), signature)
    >>> scores = step(conformed(batch_inputs, signature)) if step else model.predict_on_batch(
    ...     batch_inputs)
"""
import numpy as np


def traced_without_autograph(python_function, *example):
    """``python_function`` as a ``tf.function`` without AutoGraph (``reduce_retracing``), traced
    now for ``example`` (tensors, ``tf.TensorSpec``s or a dataset iterator); None where tracing
    it needs AutoGraph."""
    from crf_lr.compat import tf
    function = tf.function(python_function, reduce_retracing=True, autograph=False)
    try:
        function.get_concrete_function(*example)
    except tf.errors.OperatorNotAllowedInGraphError:
        return None
    return function


def frozen_step(function, signature):
    """``function`` (from :func:`traced_without_autograph`) for batches like ``signature`` with
    every variable it reads turned into a constant of its current value, as a callable on
    :func:`conformed` batches; None where this TensorFlow cannot convert it.

    For a prediction model with bf16 weights: oneDNN keeps a product's constant weights in its
    own layout once, where it lays a variable's out again at every call, which one short text
    feels most (docs/performance.md, "Prediction against PyTorch"). Converting and the first
    call's optimisation of the constants cost seconds, once; later changes of the variables are
    not seen.

        >>> step = frozen_step(step, signature) or step
    """
    from crf_lr.compat import tf
    try:
        from tensorflow.python.framework.convert_to_constants import (
            convert_variables_to_constants_v2)
        original = function.get_concrete_function(signature)
        concrete = convert_variables_to_constants_v2(original)
    except (ImportError, ValueError, tf.errors.OpError):
        return None

    def call(batch):       # tensors: the converted function keeps only its flat signature
        flat = [tf.convert_to_tensor(array) for array in tf.nest.flatten(batch)]
        return tf.nest.pack_sequence_as(original.structured_outputs, concrete(*flat))
    return call


def as_arrays(batch):
    """``batch`` with its lists turned into tuples (tf.data takes tuples) and leaves into arrays."""
    return (tuple(as_arrays(x) for x in batch) if isinstance(batch, (list, tuple))
            else np.asarray(batch))


def conformed(batch, signature):
    """``batch`` as arrays (:func:`as_arrays`) of the dtypes of ``signature``
    (:func:`free_signature`), so that a step traced for it is not traced again."""
    from crf_lr.compat import tf
    return tf.nest.map_structure(lambda array, spec: array.astype(spec.dtype.as_numpy_dtype,
                                                                  copy=False),
                                 as_arrays(batch), signature)


def free_signature(batch):
    """The ``tf.TensorSpec`` structure of batches like ``batch`` of every size and length (every
    dimension None; float arrays in Keras's float type, as ``train_on_batch`` casts them)."""
    from crf_lr.compat import keras, tf

    def spec(array):
        dtype = keras.backend.floatx() if array.dtype.kind == 'f' else array.dtype
        return tf.TensorSpec([None] * array.ndim, dtype)
    return tf.nest.map_structure(spec, as_arrays(batch))
