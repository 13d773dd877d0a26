"""C++ TensorFlow kernels compiled once per machine and TensorFlow, cached, and loaded.

``built_library(sources)`` compiles ``.cc`` files of custom ops into one library against the
installed TensorFlow's headers (``tf.sysconfig``) with the machine's instruction set, into
``$CRF_LR_CACHE`` (default ``~/.cache/crf_lr``) under a name made from the sources, TensorFlow's
version, the compiler command and the CPU's flags: another machine, TensorFlow or source builds
its own. The library is written under a temporary name and renamed (a killed build leaves
nothing half-written), and a lock file makes concurrent processes build it once. Each load marks
its library used; a build removes the other builds of the same library that no process loaded
for :data:`UNUSED_DAYS` days (what an upgrade of TensorFlow or crf_lr leaves behind).

    >>> path = built_library([Path('crf_lr/kernels/fused_ops.cc')])   # ~10 s the first time
    >>> ops = tf.load_op_library(str(path))
"""
import contextlib
import hashlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from crf_lr.atomic import atomic_path, atomic_write


UNUSED_DAYS = 30      # a build of another source, TensorFlow or machine not loaded for this long


class BuildError(RuntimeError):
    """The library could not be built; the message says why in one line."""


def cache_dir():
    """``$CRF_LR_CACHE``, else ``$XDG_CACHE_HOME/crf_lr``, else ``~/.cache/crf_lr``."""
    if os.environ.get('CRF_LR_CACHE'):
        return Path(os.environ['CRF_LR_CACHE'])
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'crf_lr'


def compiler():
    """The C++ compiler: ``$CXX``, else ``g++``, else ``c++`` (None where there is none)."""
    for name in (os.environ.get('CXX'), 'g++', 'c++'):
        if name and shutil.which(name):
            return name
    return None


def source_paths(sources):
    """``sources`` (one path or several) as a list of paths."""
    if isinstance(sources, (str, os.PathLike)):
        return [Path(sources)]
    return [Path(source) for source in sources]


def compile_command(sources, output, cxx):
    """The command that builds ``sources`` (one path or several) into the shared library
    ``output``."""
    from crf_lr.compat import tf
    return ([cxx, '-shared', '-fPIC', '-O3', '-march=native', '-fopenmp-simd',
             '-ffp-contract=off', '-w', *map(str, source_paths(sources)), '-o', str(output)]
            + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def library_path(sources, cxx):
    """Where the library of ``sources`` (one path or several) for this machine, TensorFlow and
    compiler is cached; named after the first."""
    from crf_lr.compat import tf
    from crf_lr.precision import cpu_flags
    paths = source_paths(sources)
    key = hashlib.sha256()
    for part in (*(path.read_bytes() for path in paths), tf.__version__.encode(),
                 shlex.join(compile_command(paths, 'out', cxx)).encode(),
                 ' '.join(sorted(cpu_flags())).encode()):
        key.update(part)
    return cache_dir() / f'{paths[0].stem}-{key.hexdigest()[:16]}.so'


@contextlib.contextmanager
def _locked(path):
    """Held by one process at a time (POSIX ``flock``; released if the process dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:                          # not POSIX: builds may race, renames stay whole
        yield
        return
    with open(path.with_suffix('.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def built_library(sources, on_build=None):
    """Path to the library of ``sources`` (one path or several), compiled first where it is not
    cached (``on_build()`` is called before compiling). A failed build is remembered beside it
    (``.failed``, the reason), so later processes do not compile again until a source,
    TensorFlow, compiler or machine changes. A cached library is marked used (its time set to
    now), and a build removes the other builds no process used for :data:`UNUSED_DAYS` days
    (:func:`remove_unused_builds`). Raises :class:`BuildError` with the reason (no compiler, a
    source missing, an unwritable cache, the compiler's first error line)."""
    cxx = compiler()
    if cxx is None:
        raise BuildError('no C++ compiler to build them: install g++ or set $CXX')
    try:
        path = library_path(sources, cxx)
    except OSError as error:
        raise BuildError(f'cannot read {error.filename}: {error.strerror}') from None
    failed = path.with_suffix('.failed')
    if path.exists():
        _mark_used(path)
        return path
    if failed.exists():
        raise BuildError(f'{failed.read_text().strip()} (remembered: remove {failed} to try again)')
    try:
        with _locked(path):
            if path.exists():                                # built meanwhile by another process
                return path
            if on_build is not None:
                on_build()
            _compile(sources, path, cxx)
    except OSError as error:
        raise BuildError(f'cannot write {path.parent}: {error.strerror} (set CRF_LR_CACHE to '
                         f'a writable folder)') from None
    except BuildError as error:
        with atomic_write(str(failed)) as note:
            note.write(f'{error}\n')
        raise
    remove_unused_builds(path)
    return path


def _mark_used(path):
    """Set the cached library ``path``'s time to now (a read-only cache is left as it is)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def remove_unused_builds(path, days=UNUSED_DAYS):
    """Remove the files of the other builds of ``path``'s library (its name with another key:
    other sources, TensorFlow, compiler or CPU), each untouched for ``days`` days: libraries no
    process loaded, their locks and remembered failures.

        >>> remove_unused_builds(built_library(sources))
    """
    oldest = time.time() - days * 86400
    stem = path.name.rsplit('-', 1)[0]
    for other in path.parent.glob(f'{stem}-*'):
        if other.stem == path.stem:
            continue
        with contextlib.suppress(OSError):                    # gone meanwhile, or not ours
            if other.stat().st_mtime < oldest:
                other.unlink()


def _compile(sources, path, cxx):
    """Compile ``sources`` into ``path``, written under a temporary name and renamed
    (:func:`crf_lr.atomic.atomic_path`)."""
    with atomic_path(path) as partial:
        try:
            done = subprocess.run(compile_command(sources, partial, cxx), capture_output=True,
                                  text=True)
        except OSError as error:
            raise BuildError(f'cannot run {cxx}: {error.strerror}') from None
        if done.returncode:
            lines = done.stderr.splitlines()
            first = ([line for line in lines if 'error' in line] or lines
                     or [f'exit status {done.returncode}, no message'])[0]
            raise BuildError(f'{cxx} failed: {first}')


def timed_build(sources, on_build=None):
    """(path, seconds spent building: 0 where it was cached); ``on_build`` as in
    :func:`built_library`."""
    start = time.perf_counter()
    built = []

    def building():
        built.append(True)
        if on_build is not None:
            on_build()
    path = built_library(sources, on_build=building)
    return path, (time.perf_counter() - start) if built else 0.0
