"""crf_lr.speed.native_build's flags and cache: the kernels' sources compile with TensorFlow's
headers for every x86-64 ISA level and Arm generation (into object files; a cross compiler builds
for the family this machine is not); a native build that fails is built at a baseline and says
so; a damaged cached library is built again rather than loaded; a cache that cannot be written is
one line, for the kernels and the packaged encoders; a failure found after waiting on the build
lock is taken, not compiled again; and the kernel tests fail rather than skip where a compiler
cannot build them."""
import contextlib
import errno
import ctypes
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from crf_lr.speed import fused_kernels, native_build
from crf_lr.model.convert import Converted
from helpers.paths import REPO

SMALL_SOURCE = 'extern "C" int crf_lr_probe() { return 1; }\n'
# The -march targets the kernels are compiled for, per CPU family: (the macro its compilers
# predefine, the cross compiler to use on another family's machine, the targets)
MATRIX = {
    'x86-64': ('__x86_64__', 'x86_64-linux-gnu-g++', (
        'x86-64-v2', 'haswell', 'skylake-avx512', 'icelake-server', 'sapphirerapids',
        'graniterapids', 'znver3', 'znver4', 'znver5')),     # znver5: EPYC family 26 (g++ >= 14)
    # baseline (Cortex-A72, Graviton 1); Neoverse N1 (Graviton 2, Ampere Altra); Neoverse V1
    # (Graviton 3); Neoverse V2 (Graviton 4, Grace); A64FX
    'aarch64': ('__aarch64__', 'aarch64-linux-gnu-g++', (
        'armv8-a', 'armv8.2-a+fp16+dotprod', 'armv8.4-a+sve+bf16+i8mm', 'armv9-a+bf16+i8mm',
        'armv8.2-a+sve')),
}
TARGETS = [(family, march) for family, (_, _, marches) in MATRIX.items() for march in marches]


def family_compiler(family):
    """The C++ compiler that builds for ``family``: this machine's where it is one of that
    family, else the cross compiler (None where neither is installed)."""
    macro, cross, _ = MATRIX[family]
    native = native_build.compiler()
    if native is not None and macro in native_build.predefined_macros(native):
        return native
    return cross if shutil.which(cross) else None


@pytest.fixture(scope='module')
def compile_checks():
    """``{(family, march): ('skip', why not) or ('compiled', its first error line or None)}``:
    the kernels' sources compiled to an object file (code generated, not only parsed) with
    :func:`crf_lr.speed.native_build.compile_flags` for each of :data:`TARGETS`, by
    :func:`family_compiler`, two at a time, as one translation unit (about 10 s of CPU each)."""
    unit = ''.join(f'#include "{source}"\n' for source in fused_kernels.SOURCES)

    def check(target):
        family, march = target
        cxx = family_compiler(family)
        if cxx is None:
            return 'skip', (f'no C++ compiler for {family} ({MATRIX[family][1]}; .ci/run installs '
                            f'it with apt-get)')
        if not native_build.predefined_macros(cxx, march):
            return 'skip', f'{cxx} does not know -march={march}'
        done = subprocess.run([cxx, '-c', *native_build.compile_flags(cxx, march), '-x', 'c++',
                               '-', '-o', os.devnull], input=unit, capture_output=True, text=True)
        errors = [line for line in done.stderr.splitlines() if 'error' in line]
        return 'compiled', ((errors or [f'exit status {done.returncode}'])[0]
                            if done.returncode else None)
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(TARGETS, pool.map(check, TARGETS)))


@pytest.mark.parametrize('family, march', TARGETS, ids=[f'{f}-{m}' for f, m in TARGETS])
def test_the_kernels_compile_for_every_cpu_family_and_isa_level(compile_checks, family, march):
    outcome, said = compile_checks[family, march]
    if outcome == 'skip':
        pytest.skip(said)
    assert said is None, f'{family} -march={march}: {said}'


@pytest.mark.parametrize('installed, chosen', [(('g++', 'c++', 'clang++'), 'g++'),
                                               (('c++', 'clang++'), 'c++'),
                                               (('clang++',), 'clang++'), ((), None)])
def test_the_compiler_is_cxx_else_gxx_else_cxx_else_clang(tmp_path, monkeypatch, installed,
                                                          chosen):
    for name in installed:
        (tmp_path / name).write_text('#!/bin/sh\n')
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv('PATH', str(tmp_path))
    monkeypatch.delenv('CXX', raising=False)
    assert native_build.compiler() == chosen
    if installed:
        monkeypatch.setenv('CXX', installed[-1])
        assert native_build.compiler() == installed[-1]


def test_an_arm_march_is_refused_for_the_instruction_sets_the_cpu_lacks():
    """``CRF_LR_MARCH`` on Arm: what armv9-a switches on beyond armv8-a (SVE2, bf16 ...) is
    what a Graviton 1 lacks; armv8-a asks nothing of a Graviton 4 (the compiler's own macros)."""
    cxx = family_compiler('aarch64')
    if cxx is None:
        pytest.skip('no C++ compiler for aarch64 (aarch64-linux-gnu-g++; .ci/run installs it)')
    base, v9 = (native_build.predefined_macros(cxx, march)
                for march in ('armv8-a', 'armv9-a+bf16+i8mm'))
    assert native_build._lacking(base, v9) == set()
    assert {'__ARM_FEATURE_SVE2', '__ARM_FEATURE_BF16_VECTOR_ARITHMETIC',
            '__ARM_FEATURE_DOTPROD'} <= native_build._lacking(v9, base)


def _probe(tmp_path, monkeypatch, source=SMALL_SOURCE):
    """A source file to build into a cache of its own, at -march=native (whatever CRF_LR_MARCH
    this run has)."""
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    monkeypatch.delenv('CRF_LR_MARCH', raising=False)
    path = tmp_path / 'probe.cc'
    path.write_text(source)
    return path


def test_a_native_build_that_fails_is_built_at_the_best_baseline_that_builds_and_says_so(
        tmp_path, monkeypatch):
    """Native fails (AES), x86-64-v4 too where this CPU runs it (AVX-512): built at -v3."""
    cxx = native_build.compiler()
    if cxx is None or not {'__AES__', '__AVX2__'} <= native_build.predefined_macros(cxx):
        pytest.skip('needs a compiler whose -march=native has AES and AVX2 (x86-64, 2013 on)')
    source = _probe(tmp_path, monkeypatch, '#if defined(__AES__) || defined(__AVX512F__)\n'
                    '#error not at a baseline\n#endif\n' + SMALL_SOURCE)   # -v3 has neither
    path = native_build.built_library(source)
    built = native_build.record(path)
    assert built['march'] == 'x86-64-v3'
    assert built['note'].startswith(f"built at -march={built['march']}: -march=native failed: ")
    assert 'not at a baseline' in built['note']
    assert ctypes.CDLL(str(path)).crf_lr_probe() == 1
    monkeypatch.setattr(fused_kernels, '_loaded', {'ops': object(), 'built_s': 0.0,
                                                   'note': built['note']})
    assert fused_kernels.status() == f"fused kernels: on (cached; {built['note']})"


def test_crf_lr_march_builds_at_that_level_as_another_library_and_says_so(tmp_path, monkeypatch):
    cxx = native_build.compiler()
    if cxx is None or '__SSE4_2__' not in native_build.predefined_macros(cxx):
        pytest.skip('needs a compiler for an x86-64 CPU with SSE4.2 (x86-64-v2)')
    source = _probe(tmp_path, monkeypatch, '#ifdef __AVX__\n#error not x86-64-v2\n#endif\n'
                    + SMALL_SOURCE)                      # native has AVX where it has SSE4.2
    monkeypatch.setenv('CRF_LR_MARCH', 'x86-64-v2')
    path = native_build.built_library(source)
    assert native_build.record(path) | {'size': 0, 'sha256': ''} == {
        'size': 0, 'sha256': '', 'march': 'x86-64-v2',
        'note': 'built at -march=x86-64-v2: CRF_LR_MARCH'}
    assert ctypes.CDLL(str(path)).crf_lr_probe() == 1
    monkeypatch.delenv('CRF_LR_MARCH')
    assert native_build.library_path(source, cxx) != path      # native: another library


@pytest.mark.parametrize('march, native, said', [
    ('not-a-cpu', 'native', 'CRF_LR_MARCH=not-a-cpu: {cxx} does not know -march=not-a-cpu'),
    ('x86-64-v3', 'x86-64-v2',                              # as if this CPU were a v2 one
     'CRF_LR_MARCH=x86-64-v3: this CPU lacks AVX, AVX2, BMI, BMI2, F16C, FMA, LZCNT, MOVBE, '
     'which -march=x86-64-v3 switches on'),
    ('x86-64-v2', None,                                      # -march=native fails
     'CRF_LR_MARCH=x86-64-v2: {cxx} cannot say which instruction sets this CPU has '
     '(-march=native failed)')])
def test_a_crf_lr_march_not_known_or_not_runnable_here_is_one_line_and_nothing_is_built(
        tmp_path, monkeypatch, march, native, said):
    """An unknown -march, one with instruction sets this CPU lacks (its code could stop the
    process at an illegal instruction; the system ones, SGX or PKU, do not count), or a compiler
    that cannot say what this CPU has: a BuildError naming CRF_LR_MARCH, no compiler run, and
    no cached library named."""
    cxx = native_build.compiler()
    if cxx is None or not native_build.predefined_macros(cxx, 'x86-64-v3'):
        pytest.skip('needs a compiler for x86-64')
    known = native_build.predefined_macros

    def macros(cxx, march='native'):                 # this CPU's as ``native`` names them
        if march != 'native':
            return known(cxx, march)
        return known(cxx, native) if native else frozenset()
    monkeypatch.setattr(native_build, 'predefined_macros', macros)
    source = _probe(tmp_path, monkeypatch)
    monkeypatch.setenv('CRF_LR_MARCH', march)
    monkeypatch.setattr(native_build, '_compile', lambda *args: pytest.fail('compiled'))
    with pytest.raises(native_build.BuildError) as raised:
        native_build.built_library(source)
    assert str(raised.value) == said.format(cxx=cxx)
    assert native_build.cached_library(source) is None


@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
    """``make(version, stderr='')``: a compiler script whose ``--version`` says ``version`` and
    that fails at anything else saying ``stderr`` (at -march=native: it knows no other); the
    caches of what compilers say are cleared after."""
    monkeypatch.delenv('CRF_LR_MARCH', raising=False)

    def make(version, stderr=''):
        script = tmp_path / 'g++'
        script.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "g++ (Debian) {version}" && '
                          f"exit 0\nprintf '%s' '{stderr}' >&2; exit 1\n")
        script.chmod(0o755)
        native_build.compiler_version.cache_clear()
        return str(script)
    yield make
    native_build.compiler_version.cache_clear()
    native_build.predefined_macros.cache_clear()


def test_an_upgraded_compiler_builds_again(tmp_path, monkeypatch, fake_compiler):
    """The same compiler command at another version: another library (a baseline build or a
    failure note of the old compiler is not kept)."""
    source = _probe(tmp_path, monkeypatch)
    paths = []
    for version in ('12.2.0', '12.3.0'):
        cxx = fake_compiler(version)
        assert native_build.compiler_version(cxx) == f'g++ (Debian) {version}'
        paths.append(native_build.library_path(source, cxx))
    assert paths[0] != paths[1] and paths[0].parent == paths[1].parent


@pytest.mark.parametrize('said, retried', [
    ('probe.cc:1: error: expected initializer before <', True),
    ('probe.cc:1: error: x\ng++: fatal error: Killed signal terminated program cc1plus', False),
    ('/usr/bin/ld: final link failed: No space left on device', False),
    ('probe.cc:9: internal compiler error: Segmentation fault', False),
])
def test_a_baseline_is_tried_only_where_another_march_may_mend_the_build(
        tmp_path, monkeypatch, fake_compiler, said, retried):
    """A header or ISA error is tried at a baseline; out of memory or disk, or the compiler's
    crash, is not, and its line is the one said."""
    source = _probe(tmp_path, monkeypatch)
    cxx = fake_compiler('12.2.0', said)
    monkeypatch.setattr(native_build, 'baseline_marches', lambda cxx: ['x86-64-v3', 'x86-64-v2'])
    tried = []
    compile_once = native_build._compile
    monkeypatch.setattr(native_build, '_compile', lambda sources, path, cxx, march: tried.append(
        march) or compile_once(sources, path, cxx, march))
    with pytest.raises(native_build.BuildError) as raised:
        native_build._build(source, tmp_path / 'probe.so', cxx)
    assert tried == (['native', 'x86-64-v3', 'x86-64-v2'] if retried else ['native'])
    assert str(raised.value) == f'{cxx} failed: {said.splitlines()[0 if retried else -1]}'


def test_a_failure_note_that_cannot_be_written_leaves_the_compiler_error_said(
        tmp_path, monkeypatch, fake_compiler):
    """The build failed and its ``.failed`` note cannot be written: the compiler's error is
    raised, not 'cannot write the cache'."""
    source = _probe(tmp_path, monkeypatch)
    monkeypatch.setenv('CXX', fake_compiler('12.2.0', 'probe.cc:1: error: boom'))
    monkeypatch.setattr(native_build, 'baseline_marches', lambda cxx: [])

    def unwritable(path):
        raise PermissionError(errno.EACCES, 'Permission denied', path)
    monkeypatch.setattr(native_build, 'atomic_write', unwritable)
    with pytest.raises(native_build.BuildError, match=r'g\+\+ failed: probe\.cc:1: error: boom$'):
        native_build.built_library(source)


def _truncated(path):
    with open(path, 'r+b') as f:
        f.truncate(path.stat().st_size // 2)


def _byte_changed(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _record_gone(path):
    path.with_suffix('.json').unlink()


def _record_a_list(path):
    path.with_suffix('.json').write_text('[]')


@pytest.mark.parametrize('damage', [_truncated, _byte_changed, _record_gone, _record_a_list],
                         ids=['truncated', 'a-byte-changed', 'no-record', 'record-a-list'])
def test_a_damaged_library_is_removed_and_built_again(tmp_path, monkeypatch, capsys, damage):
    source = _probe(tmp_path, monkeypatch)
    path = native_build.built_library(source)
    assert native_build.record(path)['size'] == path.stat().st_size
    damage(path)
    capsys.readouterr()
    builds = []
    assert native_build.built_library(source, on_build=lambda: builds.append(1)) == path
    assert builds == [1]
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(f'{path}: ')
    assert said[0].endswith('; removed, building it again')
    assert ctypes.CDLL(str(path)).crf_lr_probe() == 1
    assert native_build.built_library(source, on_build=lambda: builds.append(1)) == path
    assert builds == [1]                                       # whole again: cached


def test_a_truncated_kernel_library_is_built_again_not_a_bus_error(fused_ops, tmp_path):
    """A copy of this machine's kernels, truncated in a cache of its own: a process that loads
    them builds them again (about 20 s), says so on stderr (stdout may be a command's output for
    a pipe) and is on."""
    cached = native_build.library_path(fused_kernels.SOURCES, native_build.compiler())
    cache = tmp_path / 'cache'
    cache.mkdir()
    for path in (cached, cached.with_suffix('.json')):
        shutil.copy(path, cache / path.name)
    _truncated(cache / cached.name)
    done = subprocess.run([sys.executable, '-c', 'from crf_lr.speed import fused_kernels; '
                           'print(fused_kernels.status())'], capture_output=True, text=True,
                          env=dict(os.environ, CRF_LR_CACHE=str(cache)), cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f'{cache / cached.name}: ' in done.stderr
    assert 'building the fused kernels' in done.stderr
    said = done.stdout.splitlines()                      # the status line alone
    assert len(said) == 1 and said[0].startswith('fused kernels: on (built in ')


def test_a_process_that_waited_on_the_lock_takes_the_failure_left(tmp_path, monkeypatch):
    """The process that held the lock failed (its note written) while this one waited."""
    source = _probe(tmp_path, monkeypatch)
    locked = native_build._locked

    @contextlib.contextmanager
    def failed_while_waiting(path):
        with locked(path):
            path.with_suffix('.failed').write_text('g++ failed: probe.cc:1: error: as before\n')
            yield
    monkeypatch.setattr(native_build, '_locked', failed_while_waiting)
    builds = []
    with pytest.raises(native_build.BuildError,
                       match=r'^g\+\+ failed: probe\.cc:1: error: as before \(remembered: '):
        native_build.built_library(source, on_build=lambda: builds.append(1))
    assert builds == []


@pytest.fixture(params=['a-file', 'under-a-file'])
def unwritable_cache(request, tmp_path, monkeypatch):
    """``CRF_LR_CACHE`` set to a file, or to a folder under a file; ``(cache, why)``."""
    blocker = tmp_path / 'file'
    blocker.write_text('')
    cache = blocker if request.param == 'a-file' else blocker / 'cache'
    monkeypatch.setenv('CRF_LR_CACHE', str(cache))
    return cache, 'it is a file' if request.param == 'a-file' else 'Not a directory'


def test_an_unwritable_cache_turns_the_kernels_off_in_one_line(unwritable_cache, monkeypatch):
    cache, why = unwritable_cache
    monkeypatch.setattr(fused_kernels, '_loaded', {})
    assert fused_kernels.status() == (
        f"fused kernels: off (cannot write the cache {cache} ({why}): set CRF_LR_CACHE to a "
        f"writable folder; TensorFlow's ops are used, {fused_kernels.cost_without_them()})")


@pytest.mark.slow
def test_a_packaged_encoder_is_converted_into_a_temporary_folder_where_the_cache_cannot_be(
        unwritable_cache, capsys):
    from crf_lr.model.pretrained import packaged_checkpoint
    cache, why = unwritable_cache
    out = packaged_checkpoint('albert-tiny-zh')
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(
        f'cannot write the cache {cache} ({why}): set CRF_LR_CACHE to a writable folder; '
        f'albert-tiny-zh is converted into ')
    assert os.path.isfile(out.checkpoint_path + '.index') and str(cache) not in out.config_path


@pytest.mark.parametrize('passed', [False, True])
def test_a_conversion_failing_in_the_cache_goes_to_a_temporary_folder_in_one_line(
        tmp_path, monkeypatch, capsys, passed):
    """A disk that fills during the conversion (an OSError past the cache's first write): one
    line naming ``cache_dir`` where the caller passed it, else CRF_LR_CACHE."""
    from crf_lr.model import pretrained
    cache = tmp_path / 'cache'
    monkeypatch.setenv('CRF_LR_CACHE', str(cache))

    def convert(source, folder):
        if str(cache) in folder:
            raise OSError(errno.ENOSPC, 'No space left on device', folder)
        paths = [os.path.join(folder, file) for file in ('config.json', 'model.ckpt', 'vocab.txt')]
        for path in (paths[0], paths[1] + '.index', paths[2]):
            open(path, 'w').close()
        return Converted(*paths, 'albert', ())
    monkeypatch.setattr(pretrained, 'convert_checkpoint', convert)
    out = pretrained.packaged_checkpoint('albert-tiny-zh', cache_dir=cache if passed else None)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(
        f'cannot write the cache {cache} (No space left on device): set '
        f'{"cache_dir" if passed else "CRF_LR_CACHE"} to a writable folder; albert-tiny-zh is '
        'converted into ')
    assert os.path.isfile(out.checkpoint_path + '.index') and str(cache) not in out.config_path


def test_the_cost_said_where_the_kernels_are_off_is_the_one_measured_on_that_kind_of_cpu(
        tmp_path):
    cpuinfo = tmp_path / 'cpuinfo'
    cpuinfo.write_text('flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n')
    assert '1.6x in bf16' in fused_kernels.cost_without_them(str(cpuinfo))
    cpuinfo.write_text('flags\t\t: fpu avx512f avx512_bf16\n')
    assert 'about 1.1x slower (float32 and bf16' in fused_kernels.cost_without_them(str(cpuinfo))


def test_kernel_tests_fail_where_a_compiler_cannot_build_them_and_skip_without_one(tmp_path):
    """The ``fused_ops`` fixture, in two pytest processes: $CXX a compiler that fails (an error in
    the fixture: the run fails), and no compiler on the PATH."""
    test = 'tests/speed/test_fused_kernels.py::test_gelu_and_its_gradient_match_the_closed_form'
    env = {name: value for name, value in os.environ.items() if name != 'CRF_LR_MARCH'}
    env.update(CRF_LR_CACHE=str(tmp_path / 'cache'), TF_CPP_MIN_LOG_LEVEL='3')
    runs = [subprocess.Popen([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                              f'{test}[float32]'], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             env=dict(env, **change))
            for change in ({'CXX': '/bin/false'}, {'CXX': '', 'PATH': str(tmp_path)})]
    failing, missing = (run.communicate()[0] for run in runs)
    assert '1 error' in failing and '/bin/false is on the PATH but fused kernels: off (' \
        '/bin/false failed: exit status 1, no message' in failing
    assert '1 skipped' in missing and 'no C++ compiler to build them' in missing


def test_a_build_is_cached_atomic_and_keyed_by_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    source = tmp_path / 'probe.cc'
    source.write_text(SMALL_SOURCE)
    builds = []
    path = native_build.built_library(source, on_build=lambda: builds.append(1))
    assert path.exists() and path.parent == tmp_path / 'cache' and builds == [1]
    assert native_build.built_library(source, on_build=lambda: builds.append(1)) == path
    assert builds == [1]                                       # cached: not built again
    assert sorted(p.suffix for p in path.parent.iterdir()) == ['.json', '.lock', '.so']  # whole
    source.write_text(SMALL_SOURCE.replace('1;', '2;'))
    assert native_build.built_library(source) != path          # another source, another library


def test_a_cached_library_is_named_only_when_built_whole_and_nothing_is_compiled(
        tmp_path, monkeypatch):
    """cached_library (what a prediction asks): None before a build and for a damaged library,
    which it leaves where it is; the path once built."""
    source = _probe(tmp_path, monkeypatch)
    assert native_build.cached_library(source) is None
    assert not (tmp_path / 'cache').exists()                   # nothing built, nothing made
    path = native_build.built_library(source)
    assert native_build.cached_library(source) == path
    _truncated(path)
    assert native_build.cached_library(source) is None and path.exists()


def test_a_build_removes_other_builds_unused_for_a_month_and_a_load_marks_its_own(
        tmp_path, monkeypatch):
    """What an upgrade leaves (the same library with another key, untouched for 30 days) goes at
    the next build; a recent one, another library's files and a loaded one stay."""
    import time
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    cache = tmp_path / 'cache'
    cache.mkdir()
    month_ago = time.time() - 31 * 86400
    old_files = [cache / f'probe-{"0" * 16}{suffix}' for suffix in ('.so', '.lock', '.failed')]
    kept_files = [cache / f'probe-{"1" * 16}.so', cache / f'other-{"0" * 16}.so']
    for path in old_files + kept_files:
        path.write_text('')
        if path != kept_files[0]:
            os.utime(path, (month_ago, month_ago))
    source = tmp_path / 'probe.cc'
    source.write_text(SMALL_SOURCE)
    path = native_build.built_library(source)
    assert not any(p.exists() for p in old_files) and all(p.exists() for p in kept_files)
    os.utime(path, (month_ago, month_ago))
    native_build.remove_unused_builds(path)                       # its own files: never
    assert path.exists()
    assert native_build.built_library(source) == path                    # cached, and marked
    assert path.stat().st_mtime > time.time() - 60
    source.write_text(SMALL_SOURCE.replace('1;', '3;'))
    native_build.built_library(source)                           # another build keeps it
    assert path.exists()


def test_several_sources_make_one_library_keyed_by_each(tmp_path, monkeypatch):
    import ctypes
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    first, second = tmp_path / 'probe.cc', tmp_path / 'second.cc'
    first.write_text(SMALL_SOURCE)
    second.write_text('extern "C" int crf_lr_second() { return 7; }\n')
    path = native_build.built_library([first, second])
    assert path.name.startswith('probe-') and ctypes.CDLL(str(path)).crf_lr_second() == 7
    second.write_text('extern "C" int crf_lr_second() { return 8; }\n')
    assert native_build.built_library([first, second]) != path  # the second source keys it too
    second.unlink()
    with pytest.raises(native_build.BuildError, match=r'cannot read .*second\.cc'):
        native_build.built_library([first, second])


def test_a_failed_build_names_the_compilers_error_and_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    source = tmp_path / 'broken.cc'
    source.write_text('int broken = ;\n')
    with pytest.raises(native_build.BuildError, match=r"failed: .*broken\.cc:1:.*error"):
        native_build.built_library(source)
    assert sorted(p.suffix for p in (tmp_path / 'cache').iterdir()) == ['.failed', '.lock']
    builds = []                                                    # nothing half-made, and
    with pytest.raises(native_build.BuildError, match=r"broken\.cc:1:.*remove .*\.failed to try"):
        native_build.built_library(source, on_build=lambda: builds.append(1))
    assert builds == []                                            # not compiled again
    source.write_text('int mended = 1;\n')                        # another source: built
    assert native_build.built_library(source).exists()


def test_a_built_library_is_readable_by_other_users(tmp_path, monkeypatch):
    monkeypatch.setenv('CRF_LR_CACHE', str(tmp_path / 'cache'))
    source = tmp_path / 'probe.cc'
    source.write_text(SMALL_SOURCE)
    old = os.umask(0o022)
    try:
        path = native_build.built_library(source)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o755


def test_an_unwritable_cache_says_what_to_set(tmp_path, monkeypatch):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    monkeypatch.setenv('CRF_LR_CACHE', str(blocker / 'cache'))       # under a file: cannot exist
    source = tmp_path / 'probe.cc'
    source.write_text(SMALL_SOURCE)
    with pytest.raises(native_build.BuildError, match='set CRF_LR_CACHE to a writable folder'):
        native_build.built_library(source)


def test_processes_building_at_once_build_once(tmp_path):
    import subprocess
    import sys
    source = tmp_path / 'probe.cc'
    source.write_text(SMALL_SOURCE)
    builds = tmp_path / 'builds.txt'
    script = ('import sys, time; from pathlib import Path; from crf_lr.speed import native_build; '
              'print(native_build.built_library(Path(sys.argv[1]), on_build=lambda: ('
              'open(sys.argv[2], "a").write("built\\n"), time.sleep(3))))')   # the other waits
    env = dict(__import__('os').environ, CRF_LR_CACHE=str(tmp_path / 'cache'),
               TF_CPP_MIN_LOG_LEVEL='3')
    processes = [subprocess.Popen([sys.executable, '-c', script, str(source), str(builds)],
                                  env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    paths = {process.communicate()[0].strip() for process in processes}
    assert all(process.returncode == 0 for process in processes)
    assert len(paths) == 1 and builds.read_text() == 'built\n'


def test_a_compiler_that_fails_silently_is_named_with_its_exit_status(tmp_path, monkeypatch):
    source = _probe(tmp_path, monkeypatch)
    monkeypatch.setenv('CXX', '/bin/false')
    with pytest.raises(native_build.BuildError,
                       match=r'^/bin/false failed: exit status 1, no message$'):
        native_build.built_library(source)
