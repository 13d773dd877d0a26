"""TensorFlow's thread pools sized to a CPU quota (crf_lr.speed.threads): quotas read from cgroup
trees written here, as containers and hosts lay them out (v1, v2, both; a container's own view;
nested limits), and, where this process may create a cgroup (root), from a real one."""
import os
import subprocess
import sys

import pytest

import crf_lr
from crf_lr.speed import threads
from helpers.paths import REPO

sys.path.insert(0, str(REPO / 'benchmarks'))
import cpu_quota  # noqa: E402  (benchmarks/cpu_quota.py: a cgroup with a quota, made here)


def cgroup_host(tmp_path, mounts, memberships, files):
    """A fake ``/proc/self`` (its ``mountinfo`` and ``cgroup``) and cgroup folders under
    ``tmp_path``: ``mounts`` (kind, root, mount folder, options), ``memberships`` the lines of
    ``cgroup``, ``files`` {path under tmp_path: text}. Returns the fake proc folder."""
    proc = tmp_path / 'proc'
    proc.mkdir()
    lines = []
    for number, (kind, root, folder, options) in enumerate(mounts):
        point = str(tmp_path / folder).replace(' ', '\\040')
        lines.append(f'{30 + number} 25 0:{26 + number} {root} {point} rw,nosuid - {kind} '
                     f'{kind} rw,{options}')
    (proc / 'mountinfo').write_text('\n'.join(lines) + '\n')
    (proc / 'cgroup').write_text('\n'.join(memberships) + '\n')
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return str(proc)


def v2_host(tmp_path, path, files):
    return cgroup_host(tmp_path, [('cgroup2', '/', 'cgroup', 'nsdelegate')], [f'0::{path}'],
                       files)


TENSORFLOW_STARTED = threads._tensorflow_started


@pytest.fixture(autouse=True)
def tensorflow_not_started(monkeypatch):
    """Each test sizes the pools as if TensorFlow had not started (other tests of the worker
    start it), but the one on the warning for that case."""
    monkeypatch.setattr(threads, '_tensorflow_started', lambda: False)


@pytest.fixture
def many_cpus(monkeypatch):
    """A process that may run on 64 CPUs of a 64-core host."""
    monkeypatch.setattr(threads, 'affinity_cores', lambda: 64)
    monkeypatch.setattr(os, 'cpu_count', lambda: 64)


def test_a_v2_container_sees_its_quota_at_the_root_of_its_own_view(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '150000 100000\n'})
    assert threads.cpu_quota(proc) == 1.5
    assert threads.usable_cores(proc) == 2
    environ = {}
    assert threads.size_thread_pools(environ, proc) == {
        'TF_NUM_INTRAOP_THREADS': '2', 'TF_NUM_INTEROP_THREADS': '2'}
    assert environ == {'TF_NUM_INTRAOP_THREADS': '2', 'TF_NUM_INTEROP_THREADS': '2'}
    assert threads.describe(proc) == '2 of 64 CPU cores under a CPU quota of 1.5'


def test_the_smallest_quota_on_the_way_up_counts(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/jobs.slice/run-7.scope', {
        'cgroup/cpu.max': 'max 100000\n',
        'cgroup/jobs.slice/cpu.max': '300000 100000\n',
        'cgroup/jobs.slice/run-7.scope/cpu.max': '800000 100000\n'})
    assert threads.cpu_quota(proc) == 3.0
    assert threads.usable_cores(proc) == 3


def test_no_quota_leaves_tensorflow_its_own_pools(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': 'max 100000\n'})
    environ = {'OTHER': 'x'}
    assert threads.cpu_quota(proc) is None
    assert threads.usable_cores(proc) == 64
    assert threads.size_thread_pools(environ, proc) == {}
    assert environ == {'OTHER': 'x'}
    assert threads.describe(proc) == '64 CPU cores'


def test_a_quota_above_the_cpus_of_the_affinity_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, 'affinity_cores', lambda: 4)       # taskset -c 0-3
    monkeypatch.setattr(os, 'cpu_count', lambda: 64)
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '800000 100000\n'})
    assert threads.usable_cores(proc) == 4
    assert threads.size_thread_pools({}, proc) == {}
    assert threads.describe(proc) == '4 of 64 CPU cores'          # the affinity limits, not 8


def test_a_value_the_user_set_is_kept(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '100000 100000\n'})
    environ = {'TF_NUM_INTRAOP_THREADS': '8', 'TF_NUM_INTEROP_THREADS': ''}   # empty: unset
    assert threads.size_thread_pools(environ, proc) == {'TF_NUM_INTEROP_THREADS': '1'}
    assert environ == {'TF_NUM_INTRAOP_THREADS': '8', 'TF_NUM_INTEROP_THREADS': '1'}


def test_the_affinity_is_what_the_process_may_run_on(monkeypatch):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(os, 'cpu_count', lambda: 64)
    assert threads.affinity_cores() == 3


def test_a_quota_set_after_tensorflow_started_says_it_is_too_late(tmp_path, many_cpus,
                                                                   monkeypatch):
    from crf_lr.compat import tf
    tf.constant(1.0) + 1                          # the eager context and its pools start
    monkeypatch.setattr(threads, '_tensorflow_started', TENSORFLOW_STARTED)
    assert TENSORFLOW_STARTED()
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '100000 100000\n'})
    with pytest.warns(UserWarning, match='imported after TensorFlow started.*CPU quota of 1: '
                                         'import crf_lr first'):
        threads.size_thread_pools({}, proc)


def test_a_quota_under_one_core_still_gets_one_thread(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '20000 100000\n'})
    assert threads.cpu_quota(proc) == 0.2
    assert threads.usable_cores(proc) == 1


def test_a_v1_docker_container_without_a_cgroup_namespace(tmp_path, many_cpus):
    """Docker on cgroup v1 mounts the container's own cgroup (root /docker/<id>) and lists the
    full path in /proc/self/cgroup; cpu and cpuacct share one mount."""
    proc = cgroup_host(
        tmp_path, [('cgroup', '/docker/ab12', 'cgroup/cpu,cpuacct', 'cpu,cpuacct'),
                   ('cgroup', '/docker/ab12', 'cgroup/memory', 'memory')],
        ['5:memory:/docker/ab12', '4:cpu,cpuacct:/docker/ab12', '0::/'],
        {'cgroup/cpu,cpuacct/cpu.cfs_quota_us': '200000\n',
         'cgroup/cpu,cpuacct/cpu.cfs_period_us': '100000\n',
         'cgroup/memory/cpu.cfs_quota_us': '50000\n',        # not the cpu controller's mount
         'cgroup/memory/cpu.cfs_period_us': '100000\n'})
    assert threads.cpu_quota(proc) == 2.0


def test_a_v1_quota_of_minus_one_is_none(tmp_path, many_cpus):
    proc = cgroup_host(tmp_path, [('cgroup', '/', 'cpu', 'cpu')], ['3:cpu:/'], {
        'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n'})
    assert threads.cpu_quota(proc) is None


def test_both_hierarchies_the_smaller_quota(tmp_path, many_cpus):
    proc = cgroup_host(
        tmp_path, [('cgroup', '/', 'cg/cpu', 'cpu'), ('cgroup2', '/', 'cg/unified', '')],
        ['3:cpu:/batch', '0::/batch'],
        {'cg/cpu/batch/cpu.cfs_quota_us': '400000\n', 'cg/cpu/batch/cpu.cfs_period_us': '100000\n',
         'cg/unified/batch/cpu.max': '250000 100000\n'})
    assert threads.cpu_quota(proc) == 2.5


def test_a_mount_of_another_cgroup_is_not_read(tmp_path, many_cpus):
    """The mount's root /docker/ab12 is a sibling of the process's /docker/ab123, not an
    ancestor: that mount shows another cgroup, whose quota is not the process's."""
    proc = cgroup_host(tmp_path, [('cgroup2', '/docker/ab12', 'cgroup', '')], ['0::/docker/ab123'],
                       {'cgroup/cpu.max': '100000 100000\n',
                        'cgroup/docker/ab123/cpu.max': '900000 100000\n'})
    assert threads.cpu_quota(proc) is None


def test_another_cgroup_bind_mounted_beside_the_hierarchy_is_not_read(tmp_path, many_cpus):
    mounts = [('cgroup2', '/', 'cgroup', ''), ('cgroup2', '/machine.slice/vm.scope', 'vm', '')]
    proc = cgroup_host(
        tmp_path, mounts, ['0::/user.slice/me.scope'],
        {'cgroup/user.slice/me.scope/cpu.max': 'max 100000\n',
         'vm/cpu.max': '50000 100000\n'})
    assert threads.cpu_quota(proc) is None


def test_a_namespace_root_mounted_from_the_host_reads_its_mount_point(tmp_path, many_cpus):
    """In a cgroup namespace the process's path is / while the mount may show the host's path
    of that cgroup as its root."""
    proc = cgroup_host(tmp_path, [('cgroup', '/kubepods/pod7/c9', 'cpu', 'cpu')], ['3:cpu:/'],
                       {'cpu/cpu.cfs_quota_us': '150000\n', 'cpu/cpu.cfs_period_us': '100000\n'})
    assert threads.cpu_quota(proc) == 1.5


def test_a_cgroup_outside_the_namespace_is_not_read(tmp_path, many_cpus):
    """A process entered from outside the cgroup namespace sees its path as /../..."""
    proc = v2_host(tmp_path, '/../../user.slice/x.scope', {'cgroup/cpu.max': '100000 100000\n'})
    assert threads.cpu_quota(proc) is None


def test_nothing_above_the_mount_point_is_read(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': 'max 100000\n',
                                   'cpu.max': '100000 100000\n'})        # beside the mount
    assert threads.cpu_quota(proc) is None


def test_the_cpuset_controller_is_not_the_cpu_one(tmp_path, many_cpus):
    proc = cgroup_host(
        tmp_path, [('cgroup', '/', 'cpu', 'cpu,cpuacct')], ['4:cpu,cpuacct:/a', '6:cpuset:/b'],
        {'cpu/a/cpu.cfs_quota_us': '200000\n', 'cpu/a/cpu.cfs_period_us': '100000\n',
         'cpu/b/cpu.cfs_quota_us': '100000\n', 'cpu/b/cpu.cfs_period_us': '100000\n'})
    assert threads.cpu_quota(proc) == 2.0


def test_a_mount_path_that_is_not_utf8_does_not_hide_the_quota(tmp_path, many_cpus):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': '100000 100000\n'})
    with open(os.path.join(proc, 'mountinfo'), 'ab') as f:
        f.write(b'40 25 0:40 / /media/caf\xe9 rw - vfat /dev/sdb1 rw\n')
    assert threads.cpu_quota(proc) == 1.0


def test_a_mount_point_with_a_space(tmp_path, many_cpus):
    proc = cgroup_host(tmp_path, [('cgroup2', '/', 'my cgroups', '')], ['0::/'],
                       {'my cgroups/cpu.max': '100000 100000\n'})
    assert threads.cpu_quota(proc) == 1.0


@pytest.mark.parametrize('text', ['', 'garbage\n', '100000\n', 'max\n', '0 100000\n',
                                  '100000 0\n', '1e5 1e5\n'])
def test_an_unreadable_quota_is_no_quota(tmp_path, many_cpus, text):
    proc = v2_host(tmp_path, '/', {'cgroup/cpu.max': text})
    assert threads.cpu_quota(proc) is None
    assert threads.size_thread_pools({}, proc) == {}


def test_no_cgroups_at_all(tmp_path, many_cpus):
    """Not Linux, or /proc not mounted: nothing to read, nothing set."""
    assert threads.cpu_quota(str(tmp_path / 'absent')) is None
    assert threads.usable_cores(str(tmp_path / 'absent')) == 64


def test_importing_crf_lr_sizes_the_pools(monkeypatch, many_cpus):
    """The import's environment set-up calls size_thread_pools on os.environ."""
    monkeypatch.setattr(threads, 'cpu_quota', lambda proc=None: 1.0)
    for name in threads.THREAD_VARIABLES:
        monkeypatch.setenv(name, '')          # unset for the code; restored after the test
    crf_lr._set_up_environment()
    assert [os.environ.get(name) for name in threads.THREAD_VARIABLES] == ['1', '1']


def test_the_run_record_names_the_quota(monkeypatch, many_cpus):
    from crf_lr.training.run_folder import machine
    monkeypatch.setattr(threads, 'cpu_quota', lambda proc=None: 1.5)
    assert machine().startswith('2 of 64 CPU cores under a CPU quota of 1.5 (')


def test_in_a_real_one_core_quota_tensorflow_runs_one_thread_a_pool():
    """A process started in a 1-core quota imports crf_lr, then TensorFlow, runs a step: its
    environment says 1 and TensorFlow's op-scheduling pool has one thread (tf_Compute)."""
    if threads.affinity_cores() < 2:
        pytest.skip('a quota below the CPUs needs a process that may run on 2 CPUs or more')
    script = (
        'import collections, os, crf_lr\n'
        'from crf_lr.compat import tf\n'
        'tf.function(lambda x: tf.matmul(x, x) + 1)(tf.ones([64, 64])).numpy()\n'
        'names = collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip()\n'
        '                            for t in os.listdir("/proc/self/task"))\n'
        'print(os.environ["TF_NUM_INTRAOP_THREADS"], os.environ["TF_NUM_INTEROP_THREADS"],\n'
        '      names["tf_Compute"])\n')
    environ = {k: v for k, v in os.environ.items() if k not in threads.THREAD_VARIABLES}
    try:
        with cpu_quota.quota_cgroup(1) as folder:
            result = subprocess.run(cpu_quota.inside(folder, [sys.executable, '-c', script]),
                                    env=environ, text=True, capture_output=True, timeout=120)
    except cpu_quota.NoCgroup as error:
        pytest.skip(str(error))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ['1', '1', '1']
