"""The fused kernels built at each x86-64 level a failed native build falls back to
(``native_build.BASELINES``: x86-64-v4, AVX-512; -v3, AVX2 and FMA; -v2, SSE4.2; through
``$CRF_LR_MARCH``) and by clang++ (``$CXX``, where it is installed: .ci/run installs it), each in
a process of its own: their oracle tests (``-m kernel_values``) pass in every build, and their
row sums (the softmax's gradient, the layer norm and its gradients) are the same bits as this
process's build (g++, native). So the code that CPUs without this one's extensions run, and what
another compiler makes of the sources, is run here, not only compiled (the compile matrix of
test_native_build.py). A level this CPU cannot run skips, saying why.
"""
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from crf_lr.speed import native_build
from helpers.kernel_values import row_sum_outputs
from helpers.paths import REPO, TESTS

LEVELS = native_build.BASELINES
# build -> (the -march it is built at, the settings that make it): each level by this run's
# compiler, and clang++ at native
BUILDS = {**{march: (march, dict(CRF_LR_MARCH=march)) for march in LEVELS},
          'clang++': ('native', dict(CXX='clang++'))}
KERNEL_TESTS = ('tests/speed/test_fused_kernels.py', 'tests/speed/test_crf_kernel.py')


def _why_not(build):
    """Why ``build`` cannot be made and run on this machine, or None."""
    march, settings = BUILDS[build]
    cxx = settings.get('CXX') or native_build.compiler()
    if cxx is None or shutil.which(cxx) is None:
        return f'{cxx or "a C++ compiler"} is not installed (.ci/run installs it with apt-get)'
    why = native_build.unrunnable(cxx, march) if march != 'native' else None
    return None if why is None else f'-march={march}: {why}'


@pytest.fixture(scope='module')
def build_runs(fused_ops, tmp_path_factory):
    """{build: (the finished process, its cache folder, its row sums' .npz), or why this
    machine cannot make it}: each of :data:`BUILDS` built into a cache of its own and tested by
    ``python -m helpers.kernel_values`` (without this run's pytest or crf_lr settings), two
    builds at a time."""
    folder = tmp_path_factory.mktemp('isa_levels')

    def run(build):
        why = _why_not(build)
        if why is not None:
            return why
        cache, values = folder / build, folder / f'{build}.npz'
        path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')]))
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(('PYTEST_', 'CRF_LR_'))}
        env.update(BUILDS[build][1], CRF_LR_CACHE=str(cache), PYTHONPATH=path)
        done = subprocess.run([sys.executable, '-m', 'helpers.kernel_values', str(values), '-q',
                               '-p', 'no:cacheprovider', '-p', 'no:xdist',
                               f'--basetemp={folder / build}-tmp', '-m', 'kernel_values',
                               *KERNEL_TESTS], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
        return done, cache, values
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(BUILDS, pool.map(run, BUILDS)))


def _run(build_runs, build):
    found = build_runs[build]
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.mark.parametrize('build', BUILDS)
def test_the_kernels_of_each_build_pass_their_oracle_tests(build_runs, build):
    done, cache, _ = _run(build_runs, build)
    said = done.stdout[-3000:] + done.stderr[-3000:]
    summary = (done.stdout.strip().splitlines() or [''])[-1]
    assert done.returncode == 0 and ' passed' in summary and 'skipped' not in summary, said
    (library,) = cache.glob('fused_ops-*.so')
    assert native_build.record(library)['march'] == BUILDS[build][0]


@pytest.mark.parametrize('build', BUILDS)
def test_row_sums_are_the_same_bits_in_every_build(build_runs, fused_ops, build):
    """16 partial sums in a fixed order at any vector width (fused_ops.cc's LaneSum and
    ForEachLane), where a reduction of as many partial sums as lanes gave another sum at each
    level, and at SSE's 4 a less exact one; and no compiler reorders them (no fast-math)."""
    _, _, values = _run(build_runs, build)
    theirs, ours = np.load(values), row_sum_outputs(fused_ops)
    assert sorted(theirs.files) == sorted(ours)
    for name, value in ours.items():
        assert np.array_equal(theirs[name].view(np.uint32), value.view(np.uint32)), name
