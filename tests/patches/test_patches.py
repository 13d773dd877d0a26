"""crf_lr.patches: every row's target in the pinned versions, the table and the README's box,
CRF_LR_SPEED_PATCHES=0 and unverified versions (speed rows off, fixes on, training the same),
missing targets, and the patch helper itself."""
import inspect
import json
import os
import re
import subprocess
import sys

import pytest

import crf_lr.compat  # noqa: F401  (every site of TensorFlow's modules applied)
import crf_lr.model.serialization  # noqa: F401
from crf_lr import patches
from crf_lr.patches import PatchError, Row, apply, state
from crf_lr.patches.__main__ import main, markdown
from crf_lr.patches.patching import get, has, patch, resolve, restore
from helpers.paths import REPO

README = REPO / 'README.md'


class Target:
    def method(self, x, scale=1):
        return x * scale


def test_the_pinned_versions_are_the_verified_ones_and_hold_every_target():
    assert patches.installed_versions() == {package: versions[0] for package, versions
                                            in patches.VERIFIED.items()}
    for row in patches.ROWS.values():
        assert row.kind in patches.KINDS and row.verified == patches.VERIFIED
        for target in row.targets:
            owner, name = resolve(target)
            assert has(owner, name), target


def test_every_row_is_applied_here_and_each_site_goes_through_the_registry():
    import bert4keras.layers
    from crf_lr.speed import fused_kernels
    from crf_lr.speed.graph_optimisation import optimised_lightly
    import crf_lr.training.optimizers  # noqa: F401
    with optimised_lightly():                  # the row applied when a step is first called
        pass
    assert {name: state(name) for name in patches.ROWS} == dict.fromkeys(patches.ROWS, 'applied')
    attention = bert4keras.layers.MultiHeadAttention.pay_attention_to
    assert attention._crf_lr_patch == 'crf_lr.speed.attention.install.<locals>.pay_attention_to'
    assert get(*resolve(patches.ROWS['GELU'].targets[0])) is fused_kernels.gelu_erf
    bias = get(*resolve(patches.ROWS['bias gradient'].targets[0]))
    assert bias._crf_lr_patch.startswith('crf_lr.speed.fused_kernels._install_bias_gradient')


def test_the_table_prints_each_rows_state(capsys):
    main([])
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r'installed: tensorflow 2\.21\.0, tf-keras 2\.21\.0, bert4keras 0\.11\.5; '
                    r'speed patches on$', lines[0])
    assert lines[1].split()[:3] == ['patch', 'kind', 'state']
    for line, row in zip(lines[2:], patches.ROWS.values(), strict=True):
        assert line.startswith(row.name)
        assert f' {row.kind} ' in line and f' {state(row.name)} ' in line
        assert line.endswith(', '.join(row.targets))


def test_the_readme_box_is_the_registrys_markdown():
    box = re.search(r'<!-- python -m crf_lr.patches --markdown -->\n(.*?)\n<!-- end -->',
                    README.read_text(), re.S)
    assert box is not None and box.group(1) == markdown()
    assert len(box.group(1).splitlines()) <= 20


# A tiny BERT with a CRF, two steps of crf_lr's Adam; the rows' states and what the speed rows
# change, as JSON.
_TRAIN = r'''
import json, sys
import numpy as np
import crf_lr.training.optimizers
from crf_lr.speed import fused_kernels
from crf_lr import patches
from crf_lr.compat import keras
from crf_lr.layers import ConditionalRandomField
from crf_lr.patches.patching import get, resolve
from bert4keras.backend import gelu_erf
from bert4keras.layers import LayerNormalization, MultiHeadAttention
from bert4keras.models import build_transformer_model
keras.utils.set_random_seed(0)
bert = build_transformer_model(sys.argv[1], model='bert')
crf = ConditionalRandomField(lr_multiplier=10)
model = keras.Model(bert.inputs, crf(keras.layers.Dense(4)(bert.output)))
model.compile(loss=crf.sparse_loss, optimizer=crf_lr.training.optimizers.Adam(1e-2))
tokens = np.array([[2, 5, 9, 7, 3], [2, 4, 8, 3, 0]])
inputs, labels = [tokens, np.zeros_like(tokens)], np.array([[0, 1, 2, 3, 0], [0, 3, 1, 0, 0]])
losses = [float(model.train_on_batch(inputs, labels)) for _ in range(2)]
print(json.dumps(dict(
    losses=losses, states={name: patches.state(name) for name in patches.ROWS},
    wrapped=[hasattr(f, '_crf_lr_patch') for f in (
        MultiHeadAttention.pay_attention_to, LayerNormalization.call,
        get(*resolve(patches.ROWS['bias gradient'].targets[0])))],
    bert4keras_gelu=keras.utils.get_custom_objects()['gelu'] is gelu_erf,
    kernels=fused_kernels.status())))
'''


def _train(config_path, **env):
    """What :data:`_TRAIN` prints, run with ``env`` added to this process's environment."""
    env = {key: value for key, value in os.environ.items() if key != 'CRF_LR_SPEED_PATCHES'} | env
    done = subprocess.run([sys.executable, '-c', _TRAIN, config_path], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.mark.slow
def test_speed_patches_off_keep_the_fixes_and_train_to_the_same_loss(tiny_bert_config_path):
    off, _ = _train(tiny_bert_config_path, CRF_LR_SPEED_PATCHES='0')
    on, _ = _train(tiny_bert_config_path)
    for name, row in patches.ROWS.items():
        assert off['states'][name] == ('off: CRF_LR_SPEED_PATCHES=0' if row.kind == 'speed'
                                       else 'applied'), name
    assert off['wrapped'] == [False, False, False] and off['bert4keras_gelu']
    assert off['kernels'] == 'fused kernels: off (speed patches off: CRF_LR_SPEED_PATCHES=0)'
    assert on['wrapped'] == [True, True, True] and not on['bert4keras_gelu']
    assert all(value == 'applied' for name, value in on['states'].items()
               if name != 'graph options')                   # applied by crf_lr's loop only
    assert all(abs(loss) < float('inf') for loss in off['losses'])
    assert off['losses'] == pytest.approx(on['losses'], rel=1e-5)


@pytest.fixture
def fresh_line(monkeypatch, capsys):
    """The versions line not yet said in this process, CRF_LR_SPEED_PATCHES unset, and
    TensorFlow 2.22.0 installed as far as crf_lr.patches can tell."""
    monkeypatch.setattr(patches, '_said_off', False)
    monkeypatch.delenv('CRF_LR_SPEED_PATCHES', raising=False)
    installed = dict(patches.installed_versions(), tensorflow='2.22.0')
    monkeypatch.setattr(patches, 'installed_versions', lambda: installed)
    capsys.readouterr()


def _test_rows(monkeypatch, *rows):
    """Rows ``(name, kind, target)`` in the registry for the test, a target under a class of
    this module made for it (``Fresh``, with ``method``)."""
    class Fresh(Target):
        pass
    monkeypatch.setattr(sys.modules[__name__], 'Fresh', Fresh, raising=False)
    for name, kind, target in rows:
        target = target if target.startswith('no_such') else f'{__name__}.Fresh.{target}'
        monkeypatch.setitem(patches.ROWS, name, Row(name, kind, (target,), '-', __name__))
    return Fresh


def test_unverified_versions_turn_speed_patches_off_with_one_line(fresh_line, monkeypatch,
                                                                  capsys):
    Fresh = _test_rows(monkeypatch, ('speed', 'speed', 'method'), ('fix', 'fix', 'method'))
    why = 'tensorflow 2.22.0 is not among the verified versions (2.21.0)'
    assert patches.speed_off_reason() == why
    assert not apply('speed', lambda original, self, x, scale=1: 0)
    assert Fresh.method is Target.method and state('speed') == f'off: {why}'
    assert capsys.readouterr().err == (f'crf_lr: speed patches off: {why}; set '
                                       f'CRF_LR_SPEED_PATCHES=1 to force\n')      # said once
    assert apply('fix', lambda original, self, x, scale=1: 0)              # fixes stay
    assert Fresh().method(3) == 0
    monkeypatch.setenv('CRF_LR_SPEED_PATCHES', '1')
    assert patches.speed_off_reason() is None
    assert capsys.readouterr().err == ''


def test_a_missing_target_leaves_its_row_off_and_a_fix_says_why_when_called(monkeypatch):
    Fresh = _test_rows(monkeypatch, ('fix', 'fix', 'gone'), ('speed', 'speed', 'gone'),
                       ('module', 'fix', 'no_such_module_.Target.method'))
    monkeypatch.delenv('CRF_LR_SPEED_PATCHES', raising=False)
    assert not apply('speed', lambda original: 0) and not has(Fresh, 'gone')
    assert state('speed') == f'missing: no {__name__}.Fresh.gone'
    assert not apply('module', lambda original: 0)
    assert state('module') == 'missing: no no_such_module_'
    assert not apply('fix', lambda original: 0)
    with pytest.raises(PatchError) as raised:
        Fresh().gone()
    assert str(raised.value) == (
        f"crf_lr: no {__name__}.Fresh.gone in tensorflow 2.21.0, tf-keras 2.21.0, bert4keras "
        f"0.11.5; the fix 'fix' needs it (verified on tensorflow 2.21.0, tf-keras 2.21.0, "
        f"bert4keras 0.11.5)")


_MISSING = r'''
import dataclasses
import crf_lr.patches as patches
row = patches.ROWS['flat Dense']
patches.ROWS['flat Dense'] = dataclasses.replace(row, targets=('tf_keras.src.no_such_.Dense.call',))
from bert4keras.models import Transformer
del Transformer.save_weights_as_checkpoint
import crf_lr.compat
print(patches.state('flat Dense'), '|', patches.state('checkpoint saving'))
Transformer.save_weights_as_checkpoint(None, 'x')
'''


def test_import_crf_lr_goes_on_where_targets_are_missing():
    done = subprocess.run([sys.executable, '-c', _MISSING], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.splitlines()[-1] == (
        'missing: no tf_keras.src.no_such_ | '
        'missing: no bert4keras.models.Transformer.save_weights_as_checkpoint')
    assert done.stderr.splitlines()[-1].startswith(
        "crf_lr.patches.PatchError: crf_lr: no bert4keras.models.Transformer."
        "save_weights_as_checkpoint in tensorflow 2.21.0")


def test_patch_wraps_once_stacks_others_keeps_the_signature_and_restores(monkeypatch):
    original = Target.method
    monkeypatch.setattr(Target, 'method', original)          # put back whatever the test does

    def double(original, self, x, scale=1):
        return 2 * original(self, x, scale)

    def plus_one(original, self, x, scale=1):
        return original(self, x, scale) + 1

    assert patch(Target, 'method', double) and not patch(Target, 'method', double)
    assert Target().method(3, scale=2) == 12
    assert patch(Target, 'method', plus_one) and not patch(Target, 'method', double)
    assert Target().method(3) == 7
    assert str(inspect.signature(Target.method)) == '(self, x, scale=1)'
    assert restore(Target, 'method') and Target().method(3) == 6
    assert restore(Target, 'method') and Target.method is original
    assert not restore(Target, 'method')


def test_patch_and_resolve_reach_a_dicts_key():
    owner, name = resolve(f"{__name__}._REGISTRY['entries']['gelu']")
    assert owner is _REGISTRY['entries'] and name == 'gelu'
    assert patch(owner, name, lambda original, x: original(x) + 1)
    assert _REGISTRY['entries']['gelu'](-2) == 3
    assert restore(owner, name) and _REGISTRY['entries']['gelu'] is abs
    with pytest.raises(LookupError, match=r'^no tests_missing_$'):
        resolve('tests_missing_.x')


_REGISTRY = {'entries': {'gelu': abs}}


def test_speed_patches_switched_off_leave_the_target_and_say_so(monkeypatch):
    Fresh = _test_rows(monkeypatch, ('speed', 'speed', 'method'))
    monkeypatch.setenv('CRF_LR_SPEED_PATCHES', '0')
    assert not apply('speed', lambda original, self, x, scale=1: 0)
    assert Fresh.method is Target.method and state('speed') == 'off: CRF_LR_SPEED_PATCHES=0'
