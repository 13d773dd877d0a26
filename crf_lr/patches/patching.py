"""Replacing a function or registration of another library (tf-keras, bert4keras, TensorFlow)
once, around its original; the rows of :mod:`crf_lr.patches` call it.

    >>> def get_config(original, self):
    ...     return dict(original(self), extra=1)
    >>> patch(FeedForward, 'get_config', get_config)      # a second call changes nothing
    >>> restore(FeedForward, 'get_config')                # bert4keras's own again
"""
import functools
import importlib
import inspect
import re
import types

_PART = re.compile(r"\.?([A-Za-z_]\w*)|\['([^']*)'\]")


def resolve(target):
    """``(owner, name)`` of a dotted target such as ``'bert4keras.layers.FeedForward.get_config'``
    or ``"tf_keras.src.saving.object_registration._GLOBAL_CUSTOM_OBJECTS['gelu']"`` (a key of a
    dict): the object that holds it and its attribute or key, which may be missing (:func:`has`).
    Modules are imported on the way. Raises LookupError naming the first missing part above
    it (``'no tf_keras.src'``).

        >>> resolve('bert4keras.layers.FeedForward.get_config')   # (FeedForward, 'get_config')
    """
    parts = [attribute or key for attribute, key in _PART.findall(target)]
    try:
        owner = importlib.import_module(parts[0])
    except ImportError:
        raise LookupError(f'no {parts[0]}') from None
    for depth, part in enumerate(parts[1:-1], 2):
        if has(owner, part):
            owner = get(owner, part)
        elif isinstance(owner, types.ModuleType):
            try:
                owner = importlib.import_module(f'{owner.__name__}.{part}')
            except ImportError:
                raise LookupError(f'no {".".join(parts[:depth])}') from None
        else:
            raise LookupError(f'no {".".join(parts[:depth])}')
    return owner, parts[-1]


def has(owner, name):
    """True where ``owner`` (a dict: by key; else by attribute) holds ``name``."""
    return name in owner if isinstance(owner, dict) else hasattr(owner, name)


def get(owner, name):
    return owner[name] if isinstance(owner, dict) else getattr(owner, name)


def put(owner, name, value):
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, value)


def patch(owner, name, replacement):
    """Set ``owner.<name>`` (or ``owner[name]`` of a dict) to a function that calls
    ``replacement(original, *args, **kwargs)``, where ``original`` is the function it replaces.
    Idempotent: where ``replacement`` (told by its module and qualified name) already wraps
    ``owner.<name>``, at any depth, nothing changes; other patches of the same function stack.
    The new function shows the original's signature. Returns True where it patched."""
    key = f'{replacement.__module__}.{replacement.__qualname__}'
    original = function = get(owner, name)
    while function is not None:
        if getattr(function, '_crf_lr_patch', None) == key:
            return False
        function = getattr(function, '__wrapped__', None)

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return replacement(original, *args, **kwargs)

    try:              # what callers inspect (Keras passes a layer's call only what it names)
        patched.__signature__ = inspect.signature(original)
    except (TypeError, ValueError):                        # no signature to copy
        pass
    patched._crf_lr_patch = key
    put(owner, name, patched)
    return True


def restore(owner, name):
    """Undo the outermost :func:`patch` of ``owner.<name>``: what it wrapped comes back.
    Returns True where there was one to undo."""
    function = get(owner, name)
    if getattr(function, '_crf_lr_patch', None) is None:
        return False
    put(owner, name, function.__wrapped__)
    return True
