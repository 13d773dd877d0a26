"""Every replacement crf_lr makes in tf-keras, bert4keras and TensorFlow, one row each
(:data:`ROWS`): its targets, its kind (a ``fix`` bert4keras or tf-keras needs on TensorFlow
>= 2.11, or ``speed``), its switch and the versions it was verified on.

A site applies its row through :func:`apply` (or :func:`swapped`), never by assigning to
another library's attribute itself. Speed rows are off for the whole process with
``CRF_LR_SPEED_PATCHES=0``, and off, with one line on stderr, where the installed versions are
not among the verified ones (``CRF_LR_SPEED_PATCHES=1`` forces them on). A target missing in
the installed versions never stops an import: the row is left off, and a fix whose target's
owner is there gets a stand-in that raises :class:`PatchError` when it is called.
``python -m crf_lr.patches`` prints the table with each row's state in this process.

    >>> def pay_attention_to(original, self, inputs, mask=None, **kwargs): ...
    >>> apply('attention', pay_attention_to)     # False where speed patches are off
    >>> state('attention')                       # 'applied', or 'off: ...' / 'missing: ...'
"""
import contextlib
import importlib
import os
import sys

from crf_lr.patches.patching import get, has, patch, put, resolve
from crf_lr.patches.rows import KINDS, ROWS, VERIFIED, Row

_STATES = {}            # row name -> 'applied', 'off: why' or 'missing: why', in this process
_said_off = False       # the versions line, said once per process


class PatchError(RuntimeError):
    """A fix's target is missing in the installed versions and the fix is needed now."""


def installed_versions():
    """The installed version of each package of :data:`VERIFIED` (imports them)."""
    return {package: importlib.import_module(package.replace('-', '_')).__version__
            for package in VERIFIED}


def versions_text(versions):
    """``{'tensorflow': '2.21.0', 'tf-keras': ('2.21.0',)}`` -> 'tensorflow 2.21.0, tf-keras
    2.21.0'."""
    return ', '.join(f'{package} {version if isinstance(version, str) else "/".join(version)}'
                     for package, version in versions.items())


def speed_off_reason(verified=VERIFIED):
    """Why speed patches are off in this process, or None where they are on: the first time the
    installed versions are found outside ``verified``, one line on stderr says so.

        >>> speed_off_reason()          # None; 'CRF_LR_SPEED_PATCHES=0' where that is set
    """
    global _said_off
    setting = os.environ.get('CRF_LR_SPEED_PATCHES')
    if setting in ('0', '1'):
        return 'CRF_LR_SPEED_PATCHES=0' if setting == '0' else None
    installed = installed_versions()
    outside = [f'{package} {installed[package]} is not among the verified versions '
               f'({", ".join(versions)})'
               for package, versions in verified.items() if installed[package] not in versions]
    if not outside:
        return None
    why = '; '.join(outside)
    if not _said_off:
        _said_off = True
        print(f'crf_lr: speed patches off: {why}; set CRF_LR_SPEED_PATCHES=1 to force',
              file=sys.stderr, flush=True)
    return why


def _switched_off(row):
    """Why ``row`` is off (a speed row, speed patches off), recorded; else None."""
    why = speed_off_reason(row.verified) if row.kind == 'speed' else None
    if why is not None:
        _STATES[row.name] = f'off: {why}'
    return why


def _missing(row, target, error):
    """Record that ``target`` of ``row`` is missing; a fix's target whose owner is there is
    given a stand-in that raises :class:`PatchError`, so code that needs the fix says why."""
    _STATES[row.name] = f'missing: {error}'
    try:
        owner, name = resolve(target)
    except LookupError:                  # no owner: nothing there that code could call
        return
    message = (f"crf_lr: {error} in {versions_text(installed_versions())}; the fix "
               f"'{row.name}' needs it (verified on {versions_text(row.verified)})")

    def stand_in(*args, **kwargs):
        raise PatchError(message)
    if row.kind == 'fix':
        put(owner, name, stand_in)


def _places(row):
    """``(owner, name)`` of each of ``row``'s targets, or None where one is missing."""
    places = []
    for target in row.targets:
        try:
            owner, name = resolve(target)
            if not has(owner, name):
                raise LookupError(f'no {target}')
        except LookupError as error:
            _missing(row, target, error)
            return None
        places.append((owner, name))
    return places


def apply(name, replacement=None, wrap=True):
    """Apply the row ``name``: each target wrapped by ``patch(owner, name, replacement)``, or with
    ``wrap=False`` set to ``replacement`` itself (a registration), unless it is a speed row and
    speed patches are off or a target is missing. With no ``replacement`` nothing is replaced:
    crf_lr's own code changes what the row names when it runs, where this returns True.
    Idempotent; returns True where the row is applied.

        >>> apply('GELU', gelu_erf, wrap=False)         # Keras's 'gelu' and 'gelu_erf'
    """
    row = ROWS[name]
    places = None if _switched_off(row) else _places(row)
    if places is None:
        return False
    if replacement is not None:
        for owner, target in places:
            (patch if wrap else put)(owner, target, replacement)
    _STATES[name] = 'applied'
    return True


@contextlib.contextmanager
def swapped(name):
    """Within the block, the first target of the row ``name`` holds the value of its second
    (then its own again), where both are there; the block is given whether they were.

        >>> with swapped('optimizer base class') as legacy_base:
        ...     import bert4keras.optimizers        # subclasses the legacy Optimizer
    """
    places = _places(ROWS[name])
    if places is None:
        yield False
        return
    (owner, target), source = places
    original = get(owner, target)
    put(owner, target, get(*source))
    try:
        yield True
    finally:
        put(owner, target, original)
    _STATES[name] = 'applied'


def state(name):
    """'applied', 'off: why', 'missing: why' or 'not applied yet' for the row ``name`` in this
    process."""
    if name not in _STATES:
        _switched_off(ROWS[name])
    return _STATES.get(name, 'not applied yet')


__all__ = ['KINDS', 'PatchError', 'ROWS', 'Row', 'VERIFIED', 'apply', 'installed_versions',
           'speed_off_reason', 'state', 'swapped']
