"""setup.py's requirements on every platform pip may install on: exactly one TensorFlow wheel
each, ``tensorflow-cpu`` where it publishes wheels (x86-64) and ``tensorflow`` elsewhere (Arm),
both at the one version the package is tested with.

Oracle: ``packaging``'s own evaluation of each requirement's PEP 508 marker (what pip does), on
the value ``platform.machine()`` gives on each platform.
"""
import contextlib
import runpy
from importlib.metadata import PackageNotFoundError, version
from unittest import mock

import pytest
from packaging.requirements import Requirement

from helpers.paths import REPO

# platform.machine() -> the TensorFlow wheel to install: Linux and macOS on Intel / AMD,
# Windows, Linux on Arm (AWS Graviton, Ampere), macOS on Apple silicon
MACHINES = {'x86_64': 'tensorflow-cpu', 'AMD64': 'tensorflow-cpu', 'aarch64': 'tensorflow',
            'arm64': 'tensorflow'}
TENSORFLOW_VERSION = '2.21.0'


@pytest.fixture(scope='module')
def install_requires():
    """setup.py's ``install_requires``, read by running it with ``setuptools.setup`` caught."""
    with mock.patch('setuptools.setup') as setup, contextlib.chdir(REPO):
        runpy.run_path(str(REPO / 'setup.py'))
    return [Requirement(text) for text in setup.call_args.kwargs['install_requires']]


@pytest.mark.parametrize('machine', MACHINES)
def test_one_tensorflow_wheel_is_installed_on_every_platform(install_requires, machine):
    chosen = [r for r in install_requires if r.name.startswith('tensorflow')
              and (r.marker is None or r.marker.evaluate({'platform_machine': machine}))]
    assert [r.name for r in chosen] == [MACHINES[machine]]
    assert str(chosen[0].specifier) == f'=={TENSORFLOW_VERSION}'


def test_the_tensorflow_version_is_the_one_installed_here():
    """The pin is what this environment runs (``make install`` installed it from setup.py)."""
    installed = []
    for name in ('tensorflow-cpu', 'tensorflow'):
        with contextlib.suppress(PackageNotFoundError):
            installed.append(version(name))
    assert sorted(set(installed)) == [TENSORFLOW_VERSION]
