"""The fused kernels built at each x86-64 level a failed native build falls back to
(``native_build.BASELINES``: x86-64-v4, AVX-512; -v3, AVX2 and FMA; -v2, SSE4.2; through
``$CRF_LR_MARCH``), each in a process of its own: their oracle tests
(``-m kernel_values``) pass at every level, and their row sums (the softmax's gradient, the
layer norm and its gradients) are the same bits as this process's native build. So the code
that CPUs without this one's extensions run is run here, not only compiled (the ``-fsyntax-only``
matrix of test_native_build.py). A level this CPU cannot run skips, saying why."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from crf_lr.speed import native_build
from helpers.kernel_values import row_sum_outputs
from helpers.paths import REPO, TESTS

LEVELS = native_build.BASELINES
KERNEL_TESTS = ('tests/speed/test_fused_kernels.py', 'tests/speed/test_crf_kernel.py')


@pytest.fixture(scope='module')
def level_runs(fused_ops, tmp_path_factory):
    """{march: (the finished process, its cache folder, its row sums' .npz), or why this
    machine cannot run it}: each of :data:`LEVELS` built into a cache of its own and tested by
    ``python -m helpers.kernel_values`` (without this run's pytest or crf_lr settings), two
    levels at a time."""
    cxx = native_build.compiler()
    folder = tmp_path_factory.mktemp('isa_levels')

    def run(march):
        why = native_build.unrunnable(cxx, march)
        if why is not None:
            return f'-march={march}: {why}'
        cache, values = folder / march, folder / f'{march}.npz'
        path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get('PYTHONPATH')]))
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(('PYTEST_', 'CRF_LR_'))}
        env.update(CRF_LR_MARCH=march, CRF_LR_CACHE=str(cache), PYTHONPATH=path)
        done = subprocess.run([sys.executable, '-m', 'helpers.kernel_values', str(values), '-q',
                               '-p', 'no:cacheprovider', '-p', 'no:xdist',
                               f'--basetemp={folder / march}-tmp', '-m', 'kernel_values',
                               *KERNEL_TESTS], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=900)
        return done, cache, values
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(LEVELS, pool.map(run, LEVELS)))


def _level(level_runs, march):
    found = level_runs[march]
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.mark.parametrize('march', LEVELS)
def test_the_kernels_built_at_each_level_pass_their_oracle_tests(level_runs, march):
    done, cache, _ = _level(level_runs, march)
    said = done.stdout[-3000:] + done.stderr[-3000:]
    summary = (done.stdout.strip().splitlines() or [''])[-1]
    assert done.returncode == 0 and ' passed' in summary and 'skipped' not in summary, said
    (library,) = cache.glob('fused_ops-*.so')
    assert native_build.record(library)['march'] == march


@pytest.mark.parametrize('march', LEVELS)
def test_row_sums_are_the_same_bits_at_every_level(level_runs, fused_ops, march):
    """16 partial sums in a fixed order at any vector width (fused_ops.cc's LaneSum and
    ForEachLane), where a reduction of as many partial sums as lanes gave another sum at each
    level, and at SSE's 4 a less exact one."""
    _, _, values = _level(level_runs, march)
    theirs, ours = np.load(values), row_sum_outputs(fused_ops)
    assert sorted(theirs.files) == sorted(ours)
    for name, value in ours.items():
        assert np.array_equal(theirs[name].view(np.uint32), value.view(np.uint32)), name
