"""TensorFlow's thread pools sized to a container's CPU quota.

TensorFlow gives each of its two pools (one for the ops of a step, one for the work inside an op)
a thread for every CPU the process may run on, whatever CPU time its cgroup allows: ``docker run
--cpus 2`` or a Kubernetes CPU limit sets a quota (cgroup v2's ``cpu.max``, v1's
``cpu.cfs_quota_us``), not the CPUs. In a 2-core container on a 64-core host TensorFlow then runs
64 threads a pool on two cores' time (docs/performance.md, "In a container with a CPU quota").
Importing crf_lr, before TensorFlow starts its pools, calls :func:`size_thread_pools`:
``TF_NUM_INTRAOP_THREADS`` and ``TF_NUM_INTEROP_THREADS`` become the quota's cores, rounded up,
where that is fewer than the CPUs the process may run on. A value already set is kept: set them
yourself to choose. TensorFlow reads them at its first op; crf_lr imported after that warns.

    >>> cpu_quota()           # cores' worth of CPU time a period; None where no quota is set
    1.5
    >>> usable_cores()        # the quota rounded up, at most the CPUs of the process's affinity
    2
"""
import math
import os
import re
import sys
import warnings

PROC = '/proc/self'
THREAD_VARIABLES = ('TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS')


def _read(path):
    """The text of ``path``, or None where it cannot be read."""
    try:
        with open(path, encoding='utf-8', errors='surrogateescape') as f:   # any mount's path
            return f.read()
    except OSError:
        return None


def _unescape(field):
    """A mountinfo path field with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r'\\([0-7]{3})', lambda match: chr(int(match.group(1), 8)), field)


def cgroup_mounts(proc=PROC):
    """(kind, root within the hierarchy, mount point) of each cgroup mount that can hold a CPU
    quota, from ``proc``'s ``mountinfo``: kind 'v2', or 'v1' for a mount with the ``cpu``
    controller.

        >>> list(cgroup_mounts())
        [('v1', '/', '/sys/fs/cgroup/cpu'), ('v2', '/', '/sys/fs/cgroup/unified')]
    """
    for line in (_read(os.path.join(proc, 'mountinfo')) or '').splitlines():
        before, _, after = line.partition(' - ')
        fields, source = before.split(), after.split()
        if len(fields) < 5 or len(source) < 3:
            continue
        if source[0] == 'cgroup2':
            yield 'v2', _unescape(fields[3]), _unescape(fields[4])
        elif source[0] == 'cgroup' and 'cpu' in source[2].split(','):
            yield 'v1', _unescape(fields[3]), _unescape(fields[4])


def _cgroup_paths(proc):
    """{'v1': path, 'v2': path}: the process's cgroup in the v1 hierarchy with the ``cpu``
    controller and in the v2 one, from ``proc``'s ``cgroup`` (those it has)."""
    paths = {}
    for line in (_read(os.path.join(proc, 'cgroup')) or '').splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == '0' and not controllers:
            paths['v2'] = path
        elif 'cpu' in controllers.split(','):
            paths['v1'] = path
    return paths


def _within(path, folder):
    """True where ``path`` is ``folder`` or lies under it."""
    return folder == '/' or path == folder or path.startswith(folder.rstrip('/') + '/')


def _folder(root, mount_point, path):
    """The folder of cgroup ``path`` under a mount of the hierarchy's ``root`` at
    ``mount_point``: below it where ``root`` holds ``path``; the mount point itself where
    ``path`` is ``/`` (a cgroup namespace's own root, mounted from the host's view); None
    where the mount shows another cgroup (or ``path`` lies outside the namespace: ``/..``)."""
    if '..' in path.split('/'):
        return None
    if _within(path, root):
        return os.path.normpath(os.path.join(mount_point, os.path.relpath(path, root)))
    return mount_point if path == '/' else None


def _quota_at(kind, folder):
    """Cores' worth of CPU time that ``folder`` (a cgroup's folder) allows a period, or None."""
    try:
        if kind == 'v2':
            text = _read(os.path.join(folder, 'cpu.max'))
            if text is None:
                return None
            quota, period = text.split()[:2]
            if quota == 'max':
                return None
        else:
            quota = _read(os.path.join(folder, 'cpu.cfs_quota_us'))
            period = _read(os.path.join(folder, 'cpu.cfs_period_us'))
            if quota is None or period is None:
                return None
        quota, period = int(quota), int(period)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(proc=PROC):
    """Cores' worth of CPU time a period that this process's cgroups allow: the smallest quota
    from its cgroup up to the mounted root of each hierarchy (v1's ``cpu`` and v2), or None where
    none is set or none can be read.

        >>> cpu_quota()       # in a container started with `docker run --cpus 1.5`
        1.5
    """
    paths = _cgroup_paths(proc)
    quotas = []
    for kind, root, mount_point in cgroup_mounts(proc):
        if kind not in paths:
            continue
        mount_point = os.path.normpath(mount_point)
        folder = _folder(root, mount_point, paths[kind])
        while folder is not None:                 # up to the mount point: the smallest counts
            quotas.append(_quota_at(kind, folder))
            parent = os.path.dirname(folder)
            folder = None if folder == mount_point or parent == folder else parent
    quotas = [quota for quota in quotas if quota is not None]
    return min(quotas) if quotas else None


def affinity_cores():
    """How many CPUs this process may run on (what TensorFlow sizes its pools by)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):            # not Linux
        return os.cpu_count() or 1


def _within_quota(cores, quota):
    """``cores`` CPUs, or ``quota`` (cores' worth, or None) rounded up where that is fewer."""
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def usable_cores(proc=PROC):
    """The CPUs this process may run on, or its CPU quota rounded up where that is fewer."""
    return _within_quota(affinity_cores(), cpu_quota(proc))


def size_thread_pools(environ=os.environ, proc=PROC):
    """Where a CPU quota leaves fewer cores than the CPUs the process may run on, set
    ``THREAD_VARIABLES`` in ``environ`` to :func:`usable_cores` (those not set already), before
    TensorFlow starts its pools. Returns {variable: value} of those set.

        >>> size_thread_pools()     # `docker run --cpus 2` on a 64-core host
        {'TF_NUM_INTRAOP_THREADS': '2', 'TF_NUM_INTEROP_THREADS': '2'}
    """
    cpus, quota = affinity_cores(), cpu_quota(proc)
    cores = _within_quota(cpus, quota)
    if cores >= cpus:
        return {}
    chosen = {name: str(cores) for name in THREAD_VARIABLES if not environ.get(name)}
    environ.update(chosen)
    if chosen and _tensorflow_started():
        warnings.warn(f'crf_lr was imported after TensorFlow started, whose thread pools keep a '
                      f'thread for each of {cpus} CPUs under a CPU quota of '
                      f'{quota:g}: import crf_lr first, or set '
                      f'TF_NUM_INTRAOP_THREADS and TF_NUM_INTEROP_THREADS to {cores} before '
                      f'Python starts', stacklevel=2)
    return chosen


def _tensorflow_started():
    """True where TensorFlow's eager context (and with it its thread pools) already started."""
    context = sys.modules.get('tensorflow.python.eager.context')
    started = getattr(context, 'context_safe', lambda: None)()
    return bool(getattr(started, '_initialized', False))


def describe(proc=PROC):
    """The machine's cores for a run's record: '2 CPU cores', or where a CPU quota or the
    affinity leaves fewer, e.g. '2 of 64 CPU cores under a CPU quota of 1.5' (the quota named
    where it is below the CPUs the process may run on)."""
    total, cpus, quota = os.cpu_count() or 1, affinity_cores(), cpu_quota(proc)
    usable = _within_quota(cpus, quota)
    cores = f'{usable} of {total} CPU cores' if usable < total else f'{total} CPU cores'
    return cores + (f' under a CPU quota of {quota:g}' if quota is not None and quota < cpus
                    else '')
