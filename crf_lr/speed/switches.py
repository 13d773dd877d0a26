"""A per-thread on/off setting with a default, set for the length of a block.

    >>> FUSED = ThreadSwitch(default=False)
    >>> with FUSED.set(True):
    ...     assert FUSED.enabled          # in this thread, until the block ends
"""
import contextlib
import threading


class ThreadSwitch:
    """``enabled`` is the value of the innermost :meth:`set` block of this thread, else the
    default."""

    def __init__(self, default):
        self._local = threading.local()
        self._default = bool(default)

    @property
    def enabled(self):
        return getattr(self._local, 'enabled', self._default)

    @contextlib.contextmanager
    def set(self, enabled=True):
        previous = self.enabled
        self._local.enabled = bool(enabled)
        try:
            yield
        finally:
            self._local.enabled = previous
