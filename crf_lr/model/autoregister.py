"""Keras finds every crf_lr object a saved model names, whichever crf_lr module was imported.

A model of ours names layers (``crf_lr>ConditionalRandomField``, ``PieceStates``), losses and
metrics (``crf_lr>sparse_global_pointer_crossentropy``), optimizers and schedules
(``crf_lr>LayerwiseAdam``), each registered when its module is imported. So that
``keras.models.load_model`` finds them all after ``import crf_lr`` alone (or
``from crf_lr.layers import ...``), tf-keras's two loaders (``.h5`` / SavedModel, and ``.keras``)
import every registering module first. ``import crf_lr`` installs this without importing
TensorFlow: the loaders are wrapped when tf-keras is imported.

    >>> import crf_lr
    >>> from crf_lr.compat import keras
    >>> model = keras.models.load_model('model.h5')     # EfficientGlobalPointer, its loss, ...
"""
import importlib
import importlib.abc
import importlib.util
import re
import sys

from crf_lr.patches import apply

# The modules whose import registers what a saved model of crf_lr can name.
REGISTERING_MODULES = ('crf_lr.model.serialization', 'crf_lr.model.crf',
                       'crf_lr.model.global_pointer',
                       'crf_lr.model.losses', 'crf_lr.training.optimizers', 'crf_lr.model.heads')


def register_everything():
    """Import every registering module (each registers its objects once, on import)."""
    for name in REGISTERING_MODULES:
        importlib.import_module(name)


def _wrap_loaders():
    """Make tf-keras's loaders call :func:`register_everything` before they read a model (the
    registry's row 'registering loaders')."""
    apply('registering loaders', _registering_first)


def _registering_first(original, *args, _made=frozenset(), **kwargs):
    """``original(*args, **kwargs)`` after :func:`register_everything`; where the model names an
    optimizer class made by an ``extend_with_*`` factory that this process has not made, it is
    made (:func:`crf_lr.training.optimizers.extension_class`) and the model loaded again
    (``_made``: the names this load made, each once, so no loop)."""
    register_everything()
    try:
        return original(*args, **kwargs)
    except ValueError as error:
        found = _UNKNOWN_OPTIMIZER.search(str(error))
        from crf_lr.training.optimizers import extension_class
        if not found or found.group(1) in _made or extension_class(found.group(1)) is None:
            raise
        return _registering_first(original, *args, _made=_made | {found.group(1)}, **kwargs)


_UNKNOWN_OPTIMIZER = re.compile(r"Unknown optimizer: '(crf_lr>[^']+)'")


class _LoaderThenHook(importlib.abc.Loader):
    """A module's own loader, then ``hook()`` once the module has run."""

    def __init__(self, loader, hook):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.hook()

    def __getattr__(self, name):                 # resources, source, ...: the module's loader's
        return getattr(self.loader, name)


class _WhenImported(importlib.abc.MetaPathFinder):
    """Runs ``hook`` right after the module ``name`` is first imported; then steps aside."""

    def __init__(self, name, hook):
        self.name, self.hook = name, hook

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenHook(spec.loader, self._run)
        return spec

    def _run(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.hook()


def install():
    """Wrap tf-keras's loaders now if tf-keras is loaded, else as soon as it is."""
    if 'tf_keras' in sys.modules:
        _wrap_loaders()
    elif not any(isinstance(finder, _WhenImported) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WhenImported('tf_keras', _wrap_loaders))
