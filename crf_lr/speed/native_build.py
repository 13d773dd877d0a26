"""C++ TensorFlow kernels compiled once per machine and TensorFlow, cached, and loaded.

``built_library(sources)`` compiles ``.cc`` files of custom ops into one library against the
installed TensorFlow's headers (``tf.sysconfig``) with the machine's instruction set
(``-march=native``, less the extensions whose code in TensorFlow's Eigen headers does not compile:
:data:`FAILING_EXTENSIONS`; on x86 a build that still fails is tried at the levels below,
:func:`baseline_marches`, and its record says why), into ``$CRF_LR_CACHE`` (default
``~/.cache/crf_lr``) under a name made from the sources, TensorFlow's version, the compiler
command and version and the CPU's flags: another machine, TensorFlow, compiler or source builds
its own. ``$CRF_LR_MARCH`` builds for another ``-march`` than native, one whose instructions
this CPU has (:func:`target_march`; e.g. ``x86-64-v3``, where a native build misbehaves). The
library is written under a temporary name and renamed (a killed build leaves nothing
half-written), then its record (``.json``: size, sha256, ``-march``, why a baseline), which every
process checks before handing the library out: a truncated or corrupt one is removed and built
again. A lock file makes concurrent processes build it once. Each load marks its library used;
a build removes the other builds of the same library that no process loaded for
:data:`UNUSED_DAYS` days (what an upgrade of TensorFlow, the compiler or crf_lr leaves behind).

    >>> path = built_library([Path('crf_lr/speed/kernels/fused_ops.cc')])   # compiled once
    >>> ops = tf.load_op_library(str(path))
"""
import contextlib
import functools
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from crf_lr.utils.atomic import atomic_path, atomic_write


UNUSED_DAYS = 30      # a build of another source, TensorFlow or machine not loaded for this long
# Extensions -march may switch on whose code in TensorFlow 2.21's Eigen headers does not compile
# (AVX512-FP16's PacketMathFP16.h with g++ 12: Sapphire and Granite Rapids): the macro the
# compiler defines for each, and the flag that switches it off. AMX compiles (no Eigen path).
FAILING_EXTENSIONS = {'__AVX512FP16__': '-mno-avx512fp16'}
# What a compiler says when a build fails for want of memory or disk, or by its own crash: no
# other -march mends that, so no baseline is tried, and this line is the one said.
NOT_ISA_FAILURES = ('Killed signal', 'No space left', 'internal compiler error')


class BuildError(RuntimeError):
    """The library could not be built; the message says why in one line."""


def cache_dir():
    """``$CRF_LR_CACHE``, else ``$XDG_CACHE_HOME/crf_lr``, else ``~/.cache/crf_lr``."""
    if os.environ.get('CRF_LR_CACHE'):
        return Path(os.environ['CRF_LR_CACHE'])
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'crf_lr'


def compiler():
    """The C++ compiler: ``$CXX``, else ``g++``, else ``c++``, else ``clang++`` (None where there
    is none)."""
    for name in (os.environ.get('CXX'), 'g++', 'c++', 'clang++'):
        if name and shutil.which(name):
            return name
    return None


def source_paths(sources):
    """``sources`` (one path or several) as a list of paths."""
    if isinstance(sources, (str, os.PathLike)):
        return [Path(sources)]
    return [Path(source) for source in sources]


@functools.lru_cache(maxsize=None)
def predefined_macros(cxx, march='native'):
    """The names of the macros ``cxx -march=MARCH`` predefines (empty where it cannot say, e.g.
    a ``-march`` it does not know): one run of the preprocessor, once a process and ``-march``.

        >>> '__AVX512FP16__' in predefined_macros('g++', 'sapphirerapids')
        True
    """
    try:
        done = subprocess.run([cxx, f'-march={march}', '-dM', '-E', '-x', 'c++', os.devnull],
                              capture_output=True, text=True)
    except OSError:
        return frozenset()
    return frozenset(line.split()[1] for line in done.stdout.splitlines()
                     if line.startswith('#define ') and not done.returncode)


# Instruction sets that code for another -march may need though no compiler emits them on its
# own (system instructions, which a virtual machine often hides): not a reason to refuse it.
SYSTEM_EXTENSIONS = frozenset(f'__{name}__' for name in (
    'SGX', 'PKU', 'WAITPKG', 'PCONFIG', 'WBNOINVD', 'MWAITX', 'KL', 'WIDEKL', 'ENQCMD', 'UINTR',
    'SERIALIZE', 'TSXLDTRK', 'PTWRITE', 'CLDEMOTE', 'HRESET', 'SHSTK', 'RDPID', 'RDPRU',
    'CLZERO', 'CLWB', 'CLFLUSHOPT', 'XSAVE', 'XSAVEC', 'XSAVES', 'XSAVEOPT', 'FSGSBASE',
    'INVPCID', 'RTM', 'LWP', 'RDRND', 'RDSEED', 'PRFCHW', 'MOVDIRI', 'MOVDIR64B'))


def _lacking(macros, native):
    """The instruction-set macros among ``macros`` (what another ``-march`` predefines) that
    ``native`` (this CPU's) does not have: x86's upper-case ones (``__AVX2__``), Arm's
    ``__ARM_FEATURE_*``; not a CPU's or its tuning's lower-case name, the
    :data:`SYSTEM_EXTENSIONS` or the :data:`FAILING_EXTENSIONS` (off in every build)."""
    return {name for name in macros - native
            if (name.startswith(('__ARM_FEATURE_', '__ARM_NEON'))
                or (name.startswith('__') and name.endswith('__') and name.isupper()))
            and name not in SYSTEM_EXTENSIONS and name not in FAILING_EXTENSIONS}


def target_march(cxx):
    """The ``-march`` to build the kernels at: ``$CRF_LR_MARCH`` where set, else ``native``.
    Raises :class:`BuildError` naming ``CRF_LR_MARCH`` where :func:`unrunnable` says why code
    built for it may not run here.

        >>> os.environ['CRF_LR_MARCH'] = 'x86-64-v3'; target_march('g++')
        'x86-64-v3'
    """
    march = os.environ.get('CRF_LR_MARCH', '').strip() or 'native'
    why = None if march == 'native' else unrunnable(cxx, march)
    if why is not None:
        raise BuildError(f'CRF_LR_MARCH={march}: {why}')
    return march


def unrunnable(cxx, march):
    """Why code ``cxx`` builds at ``-march=MARCH`` may not run on this CPU (it does not know
    that ``-march``, or this CPU lacks an instruction set it switches on, :func:`_lacking`: an
    illegal instruction would stop the process; or it cannot tell which this CPU has), or None.

        >>> unrunnable('g++', 'sapphirerapids')        # on an AMD EPYC
        'this CPU lacks AMX_BF16, AMX_INT8, AMX_TILE, AVX512VP2INTERSECT, AVXVNNI, which ...'
    """
    macros, native = predefined_macros(cxx, march), predefined_macros(cxx)
    if not macros:
        return f'{cxx} does not know -march={march}'
    if not native:
        return f'{cxx} cannot say which instruction sets this CPU has (-march=native failed)'
    lacking = _lacking(macros, native)
    if lacking:
        names = ', '.join(sorted(name.strip('_') for name in lacking))
        return f'this CPU lacks {names}, which -march={march} switches on'
    return None


def compile_flags(cxx, march='native'):
    """The flags ``cxx`` compiles the kernels with for ``-march=MARCH``: the instruction set, less
    the :data:`FAILING_EXTENSIONS` it switches on, and TensorFlow's headers.

        >>> compile_flags('g++', 'sapphirerapids')[:2]
        ['-march=sapphirerapids', '-mno-avx512fp16']
    """
    from crf_lr.compat import tf
    macros = predefined_macros(cxx, march)
    return ([f'-march={march}', *(flag for macro, flag in FAILING_EXTENSIONS.items()
                                   if macro in macros),
             '-fPIC', '-O3', '-fopenmp-simd', '-ffp-contract=off', '-w']
            + tf.sysconfig.get_compile_flags())


# The x86-64 levels a failed native build is tried at, best first: AVX-512, AVX2 and FMA, SSE4.2.
BASELINES = ('x86-64-v4', 'x86-64-v3', 'x86-64-v2')


def baseline_marches(cxx):
    """The ``-march`` levels to build at where ``-march=native`` fails: those of
    :data:`BASELINES` this CPU runs (:func:`unrunnable`), best first; none off x86-64 (where
    the compiler knows none of them).

        >>> baseline_marches('g++')               # an AVX2 CPU without AVX-512
        ['x86-64-v3', 'x86-64-v2']
    """
    return [march for march in BASELINES if unrunnable(cxx, march) is None]


def compile_command(sources, output, cxx, march='native'):
    """The command that builds ``sources`` (one path or several) into the shared library
    ``output`` at ``-march=MARCH`` (:func:`compile_flags`)."""
    from crf_lr.compat import tf
    return ([cxx, '-shared', *compile_flags(cxx, march), *map(str, source_paths(sources)),
             '-o', str(output)] + tf.sysconfig.get_link_flags())


@functools.lru_cache(maxsize=None)
def compiler_version(cxx):
    """The first line of ``cxx --version`` ('' where it says none): one run of ``cxx``, once a
    process.

        >>> compiler_version('g++')
        'g++ (Debian 12.2.0-14) 12.2.0'
    """
    try:
        done = subprocess.run([cxx, '--version'], capture_output=True, text=True)
    except OSError:
        return ''
    return (done.stdout.splitlines() or [''])[0].strip()


def library_path(sources, cxx):
    """Where the library of ``sources`` (one path or several) for this machine, TensorFlow and
    compiler (its command, ``-march`` included, and version: an upgraded compiler builds again)
    is cached; named after the first. Raises :class:`BuildError` as :func:`target_march`."""
    from crf_lr.compat import tf
    from crf_lr.model.precision import cpu_flags
    paths = source_paths(sources)
    key = hashlib.sha256()
    for part in (*(path.read_bytes() for path in paths), tf.__version__.encode(),
                 shlex.join(compile_command(paths, 'out', cxx, target_march(cxx))).encode(),
                 compiler_version(cxx).encode(), ' '.join(sorted(cpu_flags())).encode()):
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
    cached or its record does not match it (``on_build()`` is called before compiling; a damaged
    library is removed, and a line on stderr says so). A failed build is remembered beside it
    (``.failed``, the reason), so later processes, those that waited on the build lock included,
    do not compile again until a source, TensorFlow, compiler or machine changes. A cached
    library is marked used (its time set to now), and a build removes the other builds no
    process used for :data:`UNUSED_DAYS` days (:func:`remove_unused_builds`). Raises
    :class:`BuildError` with the reason (no compiler, a source missing, an unwritable cache, the
    compiler's first error line).

        >>> built_library([Path('crf_lr/speed/kernels/fused_ops.cc')])
        PosixPath('/root/.cache/crf_lr/fused_ops-0123456789abcdef.so')
    """
    cxx = compiler()
    if cxx is None:
        raise BuildError('no C++ compiler to build them: install g++ or set $CXX')
    try:
        path = library_path(sources, cxx)
    except OSError as error:
        raise BuildError(f'cannot read {error.filename}: {error.strerror}') from None
    failed = path.with_suffix('.failed')
    if _damage(path) is None:
        _mark_used(path)
        return path
    try:
        _raise_remembered(failed)
        with _locked(path):
            damage = _damage(path)
            if damage is None:                               # built meanwhile by another process
                return path
            _raise_remembered(failed)                        # failed meanwhile
            if path.exists():
                print(f'{path}: {damage}; removed, building it again', file=sys.stderr,
                      flush=True)
                path.unlink()
            if on_build is not None:
                on_build()
            try:
                march, note = _build(sources, path, cxx)
            except BuildError as error:
                with contextlib.suppress(OSError):           # the compiler's error said, not this
                    with atomic_write(str(failed)) as file:
                        file.write(f'{error}\n')
                raise
            _write_record(path, march, note)
    except OSError as error:
        raise BuildError(unwritable_cache(path.parent, error)) from None
    remove_unused_builds(path)
    return path


def cached_library(sources):
    """Path to the library of ``sources`` where it is cached whole (as :func:`built_library`
    would load it), else None: nothing is compiled, locked or removed. For a caller that takes
    the kernels only where a build was paid already.

        >>> cached_library([Path('crf_lr/speed/kernels/fused_ops.cc')])     # None before a build
    """
    cxx = compiler()
    if cxx is None:
        return None
    try:
        path = library_path(sources, cxx)
    except (OSError, BuildError):
        return None
    return path if _damage(path) is None else None


def unwritable_cache(folder, error, setting='CRF_LR_CACHE'):
    """One line: the cache ``folder`` cannot be written (``error``, the ``OSError``), and what to
    set (``setting``: the environment variable, or the argument that named the folder).

        >>> unwritable_cache(Path('/tmp/a-file'), FileExistsError(17, 'File exists'))
        'cannot write the cache /tmp/a-file (it is a file): set CRF_LR_CACHE to a writable folder'
    """
    why = 'it is a file' if Path(folder).is_file() else error.strerror
    return f'cannot write the cache {folder} ({why}): set {setting} to a writable folder'


def _raise_remembered(failed):
    """Raise the :class:`BuildError` remembered in the failure note ``failed``, where there is
    one."""
    if failed.exists():
        raise BuildError(f'{failed.read_text().strip()} (remembered: remove {failed} to try again)')


def record(path):
    """What the build of the library at ``path`` recorded beside it (``.json``): ``size``,
    ``sha256``, ``march``, ``note`` (why not native, or ''); {} where there is no readable record.

        >>> record(built_library(sources))['march']
        'native'
    """
    try:
        found = json.loads(path.with_suffix('.json').read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _damage(path):
    """Why the cached library at ``path`` may not be loaded (missing, no record of its build, or
    another size or checksum than its build's), or None where it matches its record: a
    truncated library is a bus error in the process that loads it. One read of the file to hash
    it, cheap next to loading it."""
    if not path.exists():
        return 'not built'
    built = record(path)
    if not {'size', 'sha256'} <= built.keys():
        return 'no record of its build'
    size = path.stat().st_size
    if size != built['size']:
        return f'{size} bytes, {built["size"]} when built'
    if _sha256(path) != built['sha256']:
        return 'its checksum is not the one recorded at its build'
    return None


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as file:
        for block in iter(lambda: file.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _write_record(path, march, note):
    """Record the built library ``path``'s size and checksum, ``march`` and ``note`` beside it,
    written whole after the library (a kill between leaves a library without record: built
    again)."""
    with atomic_write(str(path.with_suffix('.json'))) as file:
        json.dump({'size': path.stat().st_size, 'sha256': _sha256(path), 'march': march,
                   'note': note}, file)


def _mark_used(path):
    """Set the cached library ``path``'s time and its record's to now (a read-only cache is left
    as it is)."""
    for used in (path, path.with_suffix('.json')):
        with contextlib.suppress(OSError):
            os.utime(used)


def remove_unused_builds(path, days=UNUSED_DAYS):
    """Remove the files of the other builds of ``path``'s library (its name with another key:
    other sources, TensorFlow, compiler or CPU), each untouched for ``days`` days: libraries no
    process loaded, their records, locks and remembered failures.

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


def _build(sources, path, cxx):
    """Compile ``sources`` into ``path`` at ``-march=native``, and where that fails on x86-64
    (but not for one of :data:`NOT_ISA_FAILURES`), at each of :func:`baseline_marches` until one
    builds; at ``$CRF_LR_MARCH`` only, where it is set (:func:`target_march`). Returns ``(march,
    note)``: the ``-march`` built at, and why it is not native ('' where it is). Raises native's
    :class:`BuildError` where every one fails."""
    march = target_march(cxx)
    if march != 'native':
        _compile(sources, path, cxx, march)
        return march, f'built at -march={march}: CRF_LR_MARCH'
    try:
        _compile(sources, path, cxx, 'native')
        return 'native', ''
    except BuildError as native:
        if any(failure in str(native) for failure in NOT_ISA_FAILURES):
            raise
        for baseline in baseline_marches(cxx):
            try:
                _compile(sources, path, cxx, baseline)
            except BuildError:
                continue
            return baseline, f'built at -march={baseline}: -march=native failed: {native}'
        raise native


def _compile(sources, path, cxx, march):
    """Compile ``sources`` into ``path`` at ``-march=MARCH``, written under a temporary name and
    renamed (:func:`crf_lr.utils.atomic.atomic_path`)."""
    with atomic_path(path) as partial:
        try:
            done = subprocess.run(compile_command(sources, partial, cxx, march),
                                  capture_output=True, text=True)
        except OSError as error:
            raise BuildError(f'cannot run {cxx}: {error.strerror}') from None
        if done.returncode:
            lines = done.stderr.splitlines()
            first = ([line for line in lines if any(f in line for f in NOT_ISA_FAILURES)]
                     or [line for line in lines if 'error' in line] or lines
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
