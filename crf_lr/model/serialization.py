"""How crf_lr's objects are saved and found again by ``keras.models.load_model``.

- ``register``: the one way crf_lr registers a class or function with Keras (as
  ``'crf_lr>Name'``, plus the names older files use), so loading needs no ``custom_objects``.
- ``layer_method`` / ``LayerMethod``: a layer's ``(y_true, y_pred)`` method used as a loss or a
  metric, bert4keras style (``loss=crf.sparse_loss``), that Keras can save. It runs the method of
  the layer that produced ``y_pred``: after loading, the loaded model's own layer.
- The optimizer state in each format: tf-keras's SavedModel loader restarts every legacy
  (OptimizerV2) optimizer although the folder's checkpoint holds its state; here it is restored.
  tf-keras's ``.keras`` files keep no state of a legacy optimizer: saving or loading one compiled
  warns (``OptimizerStateWarning``) instead of restarting it silently.

    >>> @register
    ... class MyHead(LayerMethodOwner, keras.layers.Layer):
    ...     @layer_method
    ...     def loss(self, y_true, y_pred): ...
"""
import collections
import logging
import os
import warnings
import weakref

from crf_lr.compat import keras, tf
from crf_lr.patches import apply

PACKAGE = 'crf_lr'
_PRODUCER = '_crf_lr_producer'          # attribute of a tensor: weak reference to its layer


def register(obj=None, *, name=None, aliases=()):
    """Register a class or function with Keras as ``'crf_lr>' + name`` (default: its
    ``__name__``), and as each of ``aliases`` (names that files written by older code use); a
    function also under its bare ``__name__``, the name such files give it.

    Args:
        obj: a class with ``get_config`` or a function; omit it to get a decorator.
        name: str, the registered name after ``'crf_lr>'``.
        aliases: strs, further names to find ``obj`` under.
    Returns:
        ``obj`` (or a decorator).

        >>> @register(aliases=('LayerwiseAdam',))
        ... class LayerwiseAdam(...): ...
    """
    def decorate(target):
        keras.utils.register_keras_serializable(PACKAGE, name)(target)
        bare = () if isinstance(target, type) else (target.__name__,)
        keras.utils.get_custom_objects().update(dict.fromkeys((*bare, *aliases), target))
        return target
    return decorate if obj is None else decorate(obj)


class LayerMethodOwner:
    """Mixin (before ``keras.layers.Layer``) of a layer with ``layer_method`` s: marks every tensor
    the layer outputs with (a weak reference to) the layer, so the methods find it again."""

    def __call__(self, *args, **kwargs):
        outputs = super().__call__(*args, **kwargs)
        for output in tf.nest.flatten(outputs):
            if isinstance(output, tf.Tensor):        # not the KerasTensors of model building
                setattr(output, _PRODUCER, weakref.ref(self))
        return outputs


def _producer(y_pred):
    """The LayerMethodOwner that output ``y_pred``, looking through the casts and identities that
    Keras puts between a model's output and a metric; None if there is none."""
    while True:
        found = getattr(y_pred, _PRODUCER, None)
        if found is not None:
            return found()
        op = getattr(y_pred, 'op', None) if not tf.executing_eagerly() else None
        if op is None or op.type not in ('Cast', 'Identity'):
            return None
        y_pred = op.inputs[0]


class layer_method:  # noqa: N801  (a decorator, like property)
    """Decorator of a ``(self, y_true, y_pred)`` method of a ``LayerMethodOwner`` layer: reading
    it from a layer gives a ``LayerMethod`` bound to that layer, which Keras can save.

        >>> class ConditionalRandomField(LayerMethodOwner, keras.layers.Layer):
        ...     @layer_method
        ...     def sparse_loss(self, y_true, y_pred): ...
    """

    def __init__(self, function):
        self.function = function
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__

    def __set_name__(self, owner, name):
        if not issubclass(owner, LayerMethodOwner):
            raise TypeError(f'{owner.__name__}.{name}: a layer_method needs the layer class to '
                            f'derive from LayerMethodOwner (which marks the layer\'s outputs)')
        # files written before registration name the loss by the bare method name
        keras.utils.get_custom_objects().setdefault(name, LayerMethod(name))

    def __get__(self, layer, owner=None):
        return self if layer is None else LayerMethod(self.__name__, layer, self.function)

    def __call__(self, layer, y_true, y_pred):
        return self.function(layer, y_true, y_pred)


@register
class LayerMethod:
    """A layer's ``(y_true, y_pred)`` method as a Keras loss or metric that survives saving.

    Calling it runs ``method`` of the layer that produced ``y_pred`` (found through the mark
    ``LayerMethodOwner`` puts on its outputs), or of the bound ``layer`` when ``y_pred`` is a
    tensor no such layer produced. Keras saves it as ``{'method', 'layer'}`` (the layer's name);
    a loaded one has no bound layer and so always runs the method of the layer that produced
    ``y_pred``: the loaded model's own. Bound to another model's layer (bert4keras's habit
    ``custom_objects={'sparse_loss': other_crf.sparse_loss}``), it too runs the producer's method.

    Args:
        method: str, the name of a ``layer_method`` of the layer's class.
        layer: the bound layer, or the name of the layer it was saved for (bound to none).
    Call with ``y_true``, ``y_pred`` as the method takes them; returns what the method returns.

        >>> model.compile(optimizer, loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])
        >>> keras.models.load_model('model.h5')          # no custom_objects
    """

    def __init__(self, method, layer=None, function=None):
        self.method = self.name = self.__name__ = method   # Keras names the loss / metric so
        self.layer = None if isinstance(layer, str) else layer
        self._layer_name = getattr(layer, 'name', layer)
        self._function = function      # the definition read (so ``super().sparse_loss`` works)

    def __call__(self, y_true, y_pred):
        producer = _producer(y_pred)
        if self._function is not None and producer in (None, self.layer):
            return self._function(self.layer, y_true, y_pred)
        producer = self.layer if producer is None else producer
        if not (isinstance(producer, LayerMethodOwner)
                and callable(getattr(producer, self.method, None))):
            raise ValueError(
                f'{self.method} (saved for layer {self._layer_name!r}): y_pred must be the output '
                f'of a layer with a method {self.method!r}, e.g. the model output of a '
                f'ConditionalRandomField; got {y_pred!r}, produced by {producer!r}')
        return getattr(producer, self.method)(y_true, y_pred)   # its own (or its subclass's)

    def get_config(self):
        return {'method': self.method, 'layer': self._layer_name}

    @classmethod
    def from_config(cls, config):
        return cls(config['method'], config['layer'])

    def __repr__(self):
        return f'<LayerMethod {self.method} of {self._layer_name!r}>'


class OptimizerStateWarning(UserWarning):
    """A saved or loaded model's optimizer state (step count, moments) is not kept."""


def restore_optimizer_state(model, savedmodel_dir):
    """Read the optimizer's step count and moments back from a SavedModel folder.

    ``keras.models.load_model(savedmodel_dir, compile=True)`` calls it (tf-keras alone starts every
    legacy optimizer afresh); call it yourself after ``load_model(..., compile=False)`` and your own
    ``compile``. The moments are restored when the optimizer creates them, at its first update.

    Args:
        model: a compiled ``keras.Model`` loaded from ``savedmodel_dir``.
        savedmodel_dir: str, the folder written by ``model.save(path, save_format='tf')``.
    Returns:
        None.

        >>> model = keras.models.load_model('saved/', compile=False); model.compile(...)
        >>> restore_optimizer_state(model, 'saved/')
    """
    checkpoint = os.path.join(savedmodel_dir, 'variables', 'variables')
    if not tf.io.gfile.exists(checkpoint + '.index'):
        raise FileNotFoundError(f'{savedmodel_dir!r} is not a SavedModel folder: '
                                f'{checkpoint}.index does not exist')
    if model.optimizer is None:
        raise ValueError('the model has no optimizer: load it with compile=True or compile it')
    model.load_weights(checkpoint).expect_partial()


def _legacy_optimizer(model):
    optimizer = getattr(model, 'optimizer', None)
    return optimizer if isinstance(optimizer, keras.optimizers.legacy.Optimizer) else None


class _DropMessage(logging.Filter):
    def __init__(self, text):
        super().__init__()
        self.text = text

    def filter(self, record):
        return self.text not in record.getMessage()


def _fix_savedmodel_optimizer_state():
    """tf-keras's SavedModel loader compiles the model from its config but restarts a legacy
    optimizer ("Slots cannot be restored from saved_model"); the folder's checkpoint holds the
    state, so restore it and drop that (now wrong) message."""
    def load(original, path, compile=True, options=None):
        quiet = _DropMessage('Slots cannot be restored from saved_model')
        tf.get_logger().addFilter(quiet)
        try:
            model = original(path, compile, options)
        finally:
            tf.get_logger().removeFilter(quiet)
        if compile and _legacy_optimizer(model) is not None:
            restore_optimizer_state(model, path)
        return model

    apply('SavedModel optimizer state', load)


_KERAS_FORMAT_ADVICE = ('tf-keras\'s .keras format keeps no state of a legacy (OptimizerV2) '
                        'optimizer such as LayerwiseAdam: its step count and moments start again '
                        'from zero. To resume training, save as .h5 or as a SavedModel '
                        '(save_format="tf"); to predict only, load with compile=False.')


def _fix_keras_format_optimizer_warning():
    """Warn where a ``.keras`` file drops a legacy optimizer's state: on saving a model whose
    optimizer has state, on loading one compiled."""

    def save_model(original, model, filepath, *args, **kwargs):
        optimizer = _legacy_optimizer(model)
        if optimizer is not None and optimizer.weights:
            warnings.warn(f'saving {filepath}: {_KERAS_FORMAT_ADVICE}', OptimizerStateWarning,
                          stacklevel=5)
        return original(model, filepath, *args, **kwargs)

    def load_model(original, filepath, *args, **kwargs):
        model = original(filepath, *args, **kwargs)
        if _legacy_optimizer(model) is not None:
            warnings.warn(f'loading {filepath}: {_KERAS_FORMAT_ADVICE}', OptimizerStateWarning,
                          stacklevel=5)
        return model

    apply('.keras save warning', save_model)
    apply('.keras load warning', load_model)


def _fix_keras_format_variable_names():
    """tf-keras's ``.keras`` loader builds each layer from its ``build_config`` outside the
    layer's name scope, so ``'CRF/trans'`` comes back as ``'trans'`` and every name pattern
    (``lr_multipliers``, ``exclude_from_weight_decay``) silently stops matching; build inside
    the scope that ``Layer.__call__`` opens. And with the layer names of the process: a layer
    that makes unnamed layers in its ``build`` (bert4keras's ``FeedForward``: two ``Dense``)
    came back with ``dense_10`` for ``dense``, where a model's construction builds each layer
    in a graph of its own, whose names start afresh; so they start afresh here too."""
    from tf_keras.src import backend

    def build_from_config(original, self, config):
        graph = tf.compat.v1.get_default_graph()
        names = backend.PER_GRAPH_OBJECT_NAME_UIDS
        process_names = names.get(graph)
        names[graph] = collections.defaultdict(int)
        try:
            with tf.name_scope(self._name_scope()):
                original(self, config)
        finally:
            if process_names is None:
                names.pop(graph, None)
            else:
                names[graph] = process_names

    apply('.keras variable names', build_from_config)


_fix_savedmodel_optimizer_state()
_fix_keras_format_optimizer_warning()
_fix_keras_format_variable_names()

__all__ = ['LayerMethod', 'LayerMethodOwner', 'OptimizerStateWarning', 'layer_method',
           'register', 'restore_optimizer_state']
