"""Replacing a function of another library (tf-keras, bert4keras) once, around its original.

    >>> def get_config(original, self):
    ...     return dict(original(self), extra=1)
    >>> patch(FeedForward, 'get_config', get_config)      # a second call changes nothing
"""
import functools
import inspect


def patch(owner, name, replacement):
    """Set ``owner.<name>`` to a function that calls ``replacement(original, *args, **kwargs)``,
    where ``original`` is the function it replaces. Idempotent: where ``replacement`` (told by
    its module and qualified name) already wraps ``owner.<name>``, at any depth, nothing
    changes; other patches of the same function stack. The new function shows the original's
    signature. Returns True where it patched."""
    key = f'{replacement.__module__}.{replacement.__qualname__}'
    original = function = getattr(owner, name)
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
    setattr(owner, name, patched)
    return True
