"""Writes that a kill cannot tear: a file or a whole folder is either the old one or the new one.

- ``atomic_write(path)``: a file, written under a temporary name in the same folder, flushed,
  fsynced, then ``os.replace``-d over ``path``.
- ``replace_folder(folder)``: a folder (a saved model, a checkpoint, a converted encoder), written
  as a sibling ``.NAME.partial-PID``, fsynced, then swapped in with two renames (the old folder is
  set aside as ``.NAME.previous`` first); the previous folder stays whole until the new one is.
- ``recover_folder(folder)``: what a reader or a rerun does first: puts the previous folder back
  when a kill fell between the two renames (saying so in one line on stderr), and removes
  partial writes.

No TensorFlow. For fault-injection tests, ``CRF_LR_PAUSE_AT=NAME:STAGE[:K]`` stops the process
(``SIGSTOP``, after printing ``CRF_LR_PAUSED NAME:STAGE:K`` to stderr) at the K-th (default first)
time it reaches that point, so that a test can ``SIGKILL`` it exactly there. ``NAME`` is the
file or folder name (``model``, ``checkpoint``, ``results.json``, ``log.jsonl``, ``run.json``);
``STAGE`` is ``writing`` (the temporary copy complete, the old one untouched) or, for folders,
``swapping`` (the old folder set aside, the new one not yet in place).

    >>> with atomic_write('runs/ner/results.json') as f:
    ...     json.dump(results, f)
    >>> with replace_folder('runs/ner/model') as scratch:
    ...     model.save(os.path.join(scratch, 'model.h5'))
"""
import collections
import contextlib
import os
import shutil
import signal
import sys

_PARTIAL, _PREVIOUS = '.partial', '.previous'
_reached = collections.Counter()         # pause point -> times reached in this process


def pause_point(name, stage):
    """Stop here if ``CRF_LR_PAUSE_AT`` names this point (fault-injection tests); else nothing."""
    wanted = os.environ.get('CRF_LR_PAUSE_AT')
    if not wanted:
        return
    point = f'{name}:{stage}'
    _reached[point] += 1
    if wanted in (f'{point}:{_reached[point]}', point if _reached[point] == 1 else None):
        print(f'CRF_LR_PAUSED {point}:{_reached[point]}', file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)


def _fsync_folder(folder):
    """Make the renames inside ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder or '.', os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path):
    """Make the contents of the file at ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder):
    """fsync every file under ``folder`` and the folders themselves."""
    for root, _, files in os.walk(folder):
        for name in files:
            _fsync_file(os.path.join(root, name))
        _fsync_folder(root)


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` for a writer that takes a path (``model.save``,
    ``shutil.copyfile``); on success it is fsynced and renamed to ``path``, on failure removed.

        >>> with atomic_path('out/config.json') as temporary:
        ...     shutil.copyfile(source, temporary)
    """
    folder, name = os.path.split(os.path.abspath(path))
    temporary = _partial(folder, name)
    try:
        yield temporary
        _fsync_file(temporary)
        pause_point(name, 'writing')
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_folder(folder)


@contextlib.contextmanager
def atomic_write(path, mode='w', encoding='utf-8'):
    """An open file that replaces ``path`` whole when the block ends without error.

    Args:
        path: str, the file to (re)write; mode: 'w' (text, ``encoding``) or 'wb'.
    Yields:
        the open file object.

        >>> with atomic_write('run.json') as f:
        ...     json.dump(config, f)
    """
    with atomic_path(path) as temporary:
        with open(temporary, mode, encoding=None if 'b' in mode else encoding) as f:
            yield f


def _partial(parent, name):
    """The temporary name of ``name`` written by this process: ``.NAME.partial-PID``."""
    return os.path.join(parent, f'.{name}{_PARTIAL}-{os.getpid()}')


def _siblings(folder):
    """``(parent, name)`` of ``folder`` and its set-aside path ``.NAME.previous``."""
    parent, name = os.path.split(os.path.abspath(folder))
    return parent, name, os.path.join(parent, f'.{name}{_PREVIOUS}')


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass                                          # another user's process: alive
    return True


def recover_folder(folder):
    """Undo what a kill inside :func:`replace_folder` left: the previous folder is put back if
    the kill fell between the two renames (one line on stderr says so), a finished swap's
    leftover is deleted, and so are the partial files and folders (``.*.partial-PID``) beside
    ``folder`` of processes that no longer run. Returns ``folder``.

        >>> model_files(recover_folder('runs/ner/model'))
    """
    parent, name, previous = _siblings(folder)
    if os.path.isdir(previous):
        if os.path.isdir(folder):
            shutil.rmtree(previous, ignore_errors=True)     # the swap had finished
        elif not os.path.exists(folder):            # the new one never arrived: the old one back
            os.replace(previous, folder)
            print(f'restored {folder} from {previous}, where a kill between the two renames of '
                  f'its replacement had left it', file=sys.stderr)
    for entry in os.listdir(parent) if os.path.isdir(parent) else ():
        pid = entry.rpartition(f'{_PARTIAL}-')[2]
        if entry.startswith('.') and f'{_PARTIAL}-' in entry and pid.isdigit() \
                and not _alive(int(pid)):
            path = os.path.join(parent, entry)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    return folder


def check_folder_path(folder):
    """NotADirectoryError naming ``folder`` where a file (not a folder) is there: a folder
    cannot replace it."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f'{folder} is a file, not a folder: remove it or choose another '
                                 f'path')


@contextlib.contextmanager
def replace_folder(folder):
    """A scratch folder beside ``folder`` to fill; on success it replaces ``folder`` whole.

    Write everything the folder should hold into the yielded path (``.NAME.partial-PID``). On
    leaving the block, its files are fsynced, ``folder`` is renamed aside (``.NAME.previous``),
    the scratch folder renamed to ``folder``, and the old one deleted; an exception leaves
    ``folder`` untouched. A kill at any moment leaves the old or the new folder whole, once
    :func:`recover_folder` has run (this calls it first; so do the readers of run folders).

    Yields:
        str, the scratch folder (created empty).

        >>> with replace_folder('runs/ner/checkpoint') as scratch:
        ...     checkpoint.write(os.path.join(scratch, 'last'))
    """
    recover_folder(folder)
    check_folder_path(folder)
    parent, name, previous = _siblings(folder)
    partial = _partial(parent, name)
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        yield partial
        fsync_tree(partial)
        pause_point(name, 'writing')
        if os.path.isdir(folder):
            os.replace(folder, previous)
        pause_point(name, 'swapping')
        os.replace(partial, folder)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    _fsync_folder(parent)
    shutil.rmtree(previous, ignore_errors=True)


__all__ = ['atomic_path', 'atomic_write', 'check_folder_path', 'fsync_tree', 'pause_point',
           'recover_folder', 'replace_folder']
