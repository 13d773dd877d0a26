"""The run folder and the training loop: dev selection with one final test, Ctrl-C, non-finite
losses, leftovers of interrupted checkpoint writes, the saved-model path checks, and the training
step (the losses of ``train_on_batch``, one trace per run, for every built-in head)."""
import contextlib
import inspect
import json
import os

import numpy as np
import pytest

import crf_lr  # noqa: F401  (environment before TensorFlow)
from crf_lr.training.run_folder import RunLog
from crf_lr.training.loop import fit, trace_once, train_steps
from crf_lr.serving.model_folder import model_files
from helpers.step_cases import BUILT_IN_HEADS, head_model, random_batches


@pytest.fixture
def tiny_model():
    """A fresh one-Dense model per test (cheap; a non-finite loss test poisons its weights)."""
    from crf_lr.compat import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    model.compile(keras.optimizers.legacy.SGD(0.1), loss='mse')
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype('float32')
    return model, [(x, x.sum(1, keepdims=True))]


def _run(tmp_path, name='run'):
    return RunLog(str(tmp_path / name), dict(lr=0.1), argv=[], program='test.py')


def test_the_dev_scores_select_and_the_final_test_runs_once_on_the_selected_epoch(tiny_model,
                                                                                 tmp_path):
    model, batches = tiny_model
    dev = {1: 0.5, 2: 0.9, 3: 0.7}
    saved, tested = [], []
    results = fit(model, _run(tmp_path), lambda epoch: batches,
                  lambda epoch: {'dev_f1': dev[epoch]}, 3, 'dev_f1',
                  lambda: saved.append(len(saved) + 1), final_test=lambda: tested.append(1) or
                  {'f1': 0.8}, progress=False)
    assert saved == [1, 2] and tested == [1]              # saved when dev improved; tested once
    assert (results['best_epoch'], results['best'], results['test']) == (2, 0.9, {'f1': 0.8})
    with open(tmp_path / 'run' / 'results.json', encoding='utf-8') as f:
        assert json.load(f)['test'] == {'f1': 0.8}


def test_a_rerun_of_a_finished_run_says_it_trained_nothing_and_scored_test_again(
        tiny_model, tmp_path, capsys):
    """The first run scores test once; its command run again trains no epoch, and says so and
    that test was scored again; a resumed run that trains scores it once."""
    model, batches = tiny_model
    tested = []

    def run_for(epochs):
        fit(model, _run(tmp_path), lambda epoch: batches, lambda e: {'f1': 0.1 * e}, epochs, 'f1',
            lambda: None, final_test=lambda: tested.append(1) or {'f1': 0.8}, progress=False)
        return capsys.readouterr().out.splitlines()

    assert run_for(2)[-1] == 'selected epoch 2 (f1 0.2000); test F1 0.8000, scored once with the ' \
                             'selected model'
    again = run_for(2)
    assert again == [f'{tmp_path / "run"} had finished its 2 epochs: nothing to train '
                     '(--overwrite trains afresh)',
                     'selected epoch 2 (f1 0.2000); test F1 0.8000, scored again with the selected '
                     'model (a rerun: no epoch trained)']
    longer = run_for(3)
    assert longer[0] == f'resuming {tmp_path / "run"} after epoch 2' and longer[-1].endswith(
        'scored once with the selected model') and tested == [1, 1, 1]


def test_ctrl_c_says_where_the_last_epoch_is_saved_and_the_run_resumes(tiny_model, tmp_path):
    model, batches = tiny_model

    def interrupted(epoch):
        if epoch == 1:
            raise KeyboardInterrupt
        return batches

    with pytest.raises(SystemExit, match=r'interrupted during epoch 2: the run after epoch 1 is '
                                         r'saved in .*run; run the same command again to resume'):
        fit(model, _run(tmp_path), interrupted, lambda e: {'f1': 0.1}, 3, 'f1', lambda: None,
            progress=False)
    run = _run(tmp_path)
    assert run.finished_epochs == 1
    fit(model, run, lambda epoch: batches, lambda e: {'f1': 0.1}, 3, 'f1', lambda: None,
        progress=False)
    assert [r['epoch'] for r in run.records] == [1, 2, 3]


def test_a_non_finite_loss_stops_with_the_epoch_and_step(tiny_model, tmp_path):
    model, batches = tiny_model
    x, y = batches[0]
    with pytest.raises(FloatingPointError, match=r'epoch 1, step 1: the loss is (nan|inf)'):
        fit(model, _run(tmp_path), lambda e: [(x, y * np.inf)], lambda e: {'f1': 0}, 1, 'f1',
            lambda: None, progress=False)


def test_partial_checkpoint_writes_are_removed_before_training(tiny_model, tmp_path):
    model, batches = tiny_model
    run = _run(tmp_path)
    os.makedirs(run.checkpoint_prefix + '_temp')
    fit(model, run, lambda e: batches, lambda e: {'f1': 0}, 1, 'f1', lambda: None, progress=False)
    assert not os.path.exists(run.checkpoint_prefix + '_temp')
    assert os.path.isfile(run.checkpoint_prefix + '.index')


def test_model_files_name_what_is_missing_and_hint_at_the_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match='no such folder'):
        model_files(str(tmp_path / 'nowhere'))
    (tmp_path / 'run' / 'model').mkdir(parents=True)
    for name in ('model.h5', 'labels.json', 'vocab.txt'):
        (tmp_path / 'run' / 'model' / name).write_text('x')
    with pytest.raises(FileNotFoundError, match='did you mean .*run.model\\?'):
        model_files(str(tmp_path / 'run'))
    (tmp_path / 'run' / 'model' / 'vocab.txt').unlink()
    with pytest.raises(FileNotFoundError, match='missing vocab.txt'):
        model_files(str(tmp_path / 'run' / 'model'))


def test_plateaued_compares_the_best_score_with_the_best_before_the_last_epochs():
    from crf_lr.training.loop import plateaued
    assert not plateaued([0.5, 0.6], 0.003)                       # too few epochs to judge
    assert not plateaued([0.5, 0.70, 0.702, 0.704], 0.003)        # +0.004 over the last two
    assert plateaued([0.5, 0.70, 0.702, 0.7025], 0.003)           # +0.0025
    assert plateaued([0.5, 0.70, 0.69, 0.68], 0.003)              # fell: no gain at all
    assert not plateaued([0.5, 0.70, 0.69, 0.71], 0.003, epochs=3)


def test_early_stop_ends_the_run_and_a_rerun_does_not_train_again(tiny_model, tmp_path, capsys):
    """The rerun says at once that the run had stopped (not 'resuming', then 'stopped')."""
    model, batches = tiny_model
    dev = {1: 0.5, 2: 0.8, 3: 0.801, 4: 0.802, 5: 0.9}
    trained = []

    def batches_for(epoch):
        trained.append(epoch)
        return batches

    def run():
        results = fit(model, _run(tmp_path), batches_for, lambda e: {'f1': dev[e]}, 5, 'f1',
                      lambda: None, final_test=lambda: {'f1': 0.8}, progress=False,
                      stop_gain=0.003)
        return results, capsys.readouterr().out.splitlines()

    results, said = run()
    assert trained == [0, 1, 2, 3] and results['stopped_after_epoch'] == 4
    assert results['best_epoch'] == 4
    assert said[-2:] == ['stopped after epoch 4: f1 rose by less than 0.003 over 2 epochs',
                         'selected epoch 4 (f1 0.8020); test F1 0.8000, scored once with the '
                         'selected model']
    results, said = run()
    assert trained == [0, 1, 2, 3] and results['stopped_after_epoch'] == 4  # still stopped
    assert said == [f'{tmp_path / "run"} had stopped after epoch 4 (f1 rose by less than 0.003 '
                    'over 2 epochs): nothing to train (--overwrite trains afresh)',
                    'selected epoch 4 (f1 0.8020); test F1 0.8000, scored again with the '
                    'selected model (a rerun: no epoch trained)']


def test_a_rerun_of_a_run_killed_before_its_test_scores_it_once(tiny_model, tmp_path, capsys):
    """Killed in its final test after the last epoch: the rerun scores test for the first time
    and does not say 'again'."""
    model, batches = tiny_model

    def killed():
        raise KeyboardInterrupt

    for final_test in (killed, lambda: {'f1': 0.8}):
        with contextlib.suppress(KeyboardInterrupt):
            fit(model, _run(tmp_path), lambda e: batches, lambda e: {'f1': 0.1 * e}, 2, 'f1',
                lambda: None, final_test=final_test, progress=False)
    assert capsys.readouterr().out.splitlines()[-1] == (
        'selected epoch 2 (f1 0.2000); test F1 0.8000, scored once with the selected model (a '
        'rerun: no epoch trained)')


def test_the_step_dataset_yields_each_batch_as_given_in_the_first_batch_types():
    """runs.train_steps' input: batches of any size and length (a batch of no rows too) come
    back in order, equal, in the first batch's integer types and Keras's float type, with every
    dimension None in the signature."""
    from crf_lr.training.loop import _batches_dataset
    rng = np.random.default_rng(0)
    batches = [((rng.integers(0, 9, (2, 3)), np.zeros((2, 3), np.int32)), rng.random((2, 3, 4))),
               ((rng.integers(0, 9, (0, 5)), np.zeros((0, 5), np.int64)), np.zeros((0, 5, 4))),
               ((rng.integers(0, 9, (1, 7)), np.ones((1, 7), np.int32)), rng.random((1, 7, 4)))]
    dataset = _batches_dataset(batches)
    (ids, segments), targets = dataset.element_spec
    assert [s.dtype.name for s in (ids, segments, targets)] == ['int64', 'int32', 'float32']
    assert [spec.shape.as_list() for spec in (ids, segments, targets)] == [
        [None, None], [None, None], [None, None, None]]
    got = list(dataset.as_numpy_iterator())
    assert len(got) == 3
    for ((ids, segments), targets), ((want_ids, want_segments), want_targets) in zip(got, batches):
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(segments, want_segments)
        np.testing.assert_array_equal(targets, want_targets.astype(np.float32))
    with pytest.raises(ValueError, match='no batches'):
        next(train_steps(None, []))


@pytest.mark.parametrize('name', BUILT_IN_HEADS)
def test_train_steps_give_the_train_on_batch_losses_and_trace_once(name):
    """runs.fit's step (one trace for batches of every shape, over two calls) against
    model.train_on_batch (a trace per new shape until Keras generalises them)."""
    model, head = head_model(name)
    epochs = [random_batches(head, sentences=14, batch_size=4, seed=seed) for seed in (0, 1)]
    assert len({inputs[0].shape for batches in epochs for inputs, _ in batches}) >= 5
    expected = [float(model.train_on_batch(inputs, targets, return_dict=True)['loss'])
                for batches in epochs for inputs, targets in batches]
    assert model.train_function.experimental_get_tracing_count() > 1
    model, _ = head_model(name)
    losses = [loss for batches in epochs for loss in train_steps(model, batches)]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert model.train_function.experimental_get_tracing_count() == 1
    model, _ = head_model(name)                 # train_on_batch after trace_once: no new trace
    trace_once(model, epochs[0][0])
    losses = [float(model.train_on_batch(inputs, targets, return_dict=True)['loss'])
              for batches in epochs for inputs, targets in batches]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert model.train_function.experimental_get_tracing_count() == 1


def test_trace_once_serves_fit_and_traces_again_after_a_compile():
    """model.fit runs the step trace_once traced (no trace of its own); model.compile forgets
    it, and trace_once traces anew (once), as it does for another crf_xla; an uncompiled model
    is named."""
    model, head = head_model('crf')
    batches = random_batches(head, sentences=8, batch_size=4)
    step = trace_once(model, batches[0])
    assert trace_once(model, batches[1]) is step                  # traced already: kept
    inputs, targets = batches[0]
    model.fit(inputs, targets, batch_size=2, epochs=1, verbose=0)
    assert model.train_function is step and step.experimental_get_tracing_count() == 1
    model.compile(model.optimizer, loss=model.loss)
    again = trace_once(model, batches[0])
    assert again is not step and again.experimental_get_tracing_count() == 1
    assert trace_once(model, batches[0], crf_xla=True) is not again      # another choice
    model, _ = head_model('crf')
    model.optimizer = None
    with pytest.raises(ValueError, match='not compiled; call model.compile'):
        trace_once(model, batches[0])


def test_one_batch_datasets_are_built_without_autotuning():
    """Deleting an iterator of an autotuned dataset stalled up to 1.3 s after a training step
    (TF 2.21; benchmarks/iterator_stall.py): train_steps' dataset and the one-batch datasets of
    train_on_batch / test_on_batch / predict_on_batch (crf_lr.compat's fix) have autotuning off,
    the datasets of model.fit keep it."""
    from crf_lr.compat import tf
    from crf_lr.training.loop import _batches_dataset, _step_iterator
    from tf_keras.src.engine import data_adapter
    x = np.zeros((2, 3), np.float32)
    batch_iterator = data_adapter.single_batch_iterator(tf.distribute.get_strategy(), x, x)
    assert batch_iterator._dataset.options().autotune.enabled is False
    model, head = head_model('crf')
    step_iterator = _step_iterator(model, _batches_dataset(random_batches(head, 4, 2)))
    assert step_iterator._dataset.options().autotune.enabled is False
    handler = data_adapter.DataHandler(x, x, batch_size=1)
    assert handler._dataset.options().autotune.enabled is not False


def _traced_files(branch_on_values):
    """Train a Dense model with a layer that records the file its ``call`` runs from (AutoGraph
    runs a rewritten copy from a generated file) and, if ``branch_on_values``, branches in Python
    on a tensor's value (which needs AutoGraph); returns (files, losses, train_on_batch losses)."""
    from crf_lr.compat import keras, tf
    files = []

    class Recording(keras.layers.Layer):
        def call(self, inputs):
            files.append(inspect.currentframe().f_code.co_filename)
            if branch_on_values and tf.reduce_sum(inputs) > 1e9:
                inputs = inputs * 0
            return inputs

    def build():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,)), Recording()])
        model.compile(keras.optimizers.legacy.SGD(0.1), loss='mse')
        return model
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(n, 3)).astype('float32'), np.ones((n, 2), 'float32'))
               for n in (4, 3)]
    model = build()
    files.clear()                                        # the calls that built the model
    losses = list(train_steps(model, batches))
    traced = list(files)
    model = build()
    expected = [float(model.train_on_batch(x, y)) for x, y in batches]
    return traced, losses, expected


def test_train_steps_trace_without_autograph_and_keep_it_for_layers_that_need_it():
    """Tracing without AutoGraph halves a 4-layer step's trace; a layer that branches on tensor
    values still trains, with AutoGraph (same losses as train_on_batch either way)."""
    files, losses, expected = _traced_files(branch_on_values=False)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert files and set(files) == {__file__}                 # its own source, not rewritten
    files, losses, expected = _traced_files(branch_on_values=True)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert __file__ in files and len(set(files)) == 2         # tried as is, then rewritten


def test_train_steps_trace_the_crf_without_xla_unless_asked(monkeypatch):
    """The CRF's forward-backward runs without XLA in runs.fit's step (crf_xla=False), with it
    when asked where its CPU kernel does not run; crf_lr.model.crf.use_xla restores the module's
    setting after the block."""
    import crf_lr.model.crf as crf_module
    from crf_lr.speed.fused_kernels import fused_kernels

    def refuse(*args):
        raise AssertionError('the XLA forward-backward was traced')
    monkeypatch.setitem(crf_module._COMPILED, True, refuse)
    model, head = head_model('crf')
    batches = random_batches(head, sentences=6, batch_size=3)
    assert all(np.isfinite(list(train_steps(model, batches))))
    assert crf_module.USE_XLA is True
    with fused_kernels(False):
        model, _ = head_model('crf')
        with pytest.raises(AssertionError, match='XLA forward-backward was traced'):
            list(train_steps(model, batches, crf_xla=True))
    assert crf_module.USE_XLA is True


def test_a_run_that_stopped_before_training_does_not_block_its_folder(tmp_path):
    """Other arguments are refused only where the folder holds finished work (here: a model),
    not results.json alone (written before the first epoch)."""
    RunLog(str(tmp_path / 'run'), dict(encoder='minilm-en'), argv=[], program='test.py')
    (tmp_path / 'run' / 'results.json').write_text('{"epochs": []}', encoding='utf-8')
    RunLog(str(tmp_path / 'run'), dict(encoder=None), argv=[], program='test.py')
    (tmp_path / 'run' / 'model').mkdir()
    (tmp_path / 'run' / 'model' / 'model.h5').write_text('', encoding='utf-8')
    with pytest.raises(SystemExit, match=r"holds a trained run \(its epochs or model\) made with "
                                         r"other arguments \(encoder: not given there, "
                                         r"'minilm-en' now\)"):
        RunLog(str(tmp_path / 'run'), dict(encoder='minilm-en'), argv=[], program='test.py')


@pytest.mark.parametrize('cpuinfo, model', [
    ('processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu\n'
     'processor\t: 1\nmodel name\t: AMD EPYC 9R14\n', 'AMD EPYC 9R14'),
    ('processor\t: 0\nFeatures\t: fp asimd sve bf16\nCPU implementer\t: 0x41\n'
     'CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\n', 'Arm Neoverse V1'),
    ('processor\t: 0\nCPU implementer\t: 0xc0\nCPU part\t: 0xac3\n',
     'Arm CPU part 0xac3 (implementer 0xc0)'),
], ids=['x86', 'graviton-3', 'unknown-arm'])
def test_the_cpu_model_is_named_on_x86_and_arm(tmp_path, cpuinfo, model):
    from crf_lr.training.run_folder import cpu_model
    path = tmp_path / 'cpuinfo'
    path.write_text(cpuinfo)
    assert cpu_model(str(path)) == model
    assert cpu_model(str(tmp_path / 'missing'))          # the architecture, at least


def test_a_run_recorded_before_file_contents_resumes_and_a_changed_file_is_refused(tmp_path):
    """A run.json without the files' contents (written before they were recorded) resumes;
    one with them refuses another content, but a test file's."""
    from crf_lr.training.run_folder import refuse_other_arguments
    (tmp_path / 'model').mkdir()
    (tmp_path / 'model' / 'model.h5').write_text('x', encoding='utf-8')
    (tmp_path / 'run.json').write_text(json.dumps(dict(config=dict(lr=0.5))), encoding='utf-8')
    now = dict(lr=0.5, train_file_content='9 bytes, sha256 00', test_file_content='1 bytes')
    refuse_other_arguments(str(tmp_path), now)
    (tmp_path / 'run.json').write_text(json.dumps(dict(config=dict(
        lr=0.5, train_file_content='8 bytes, sha256 11', test_file_content='2 bytes'))),
        encoding='utf-8')
    with pytest.raises(SystemExit, match=r"other arguments \(train_file_content: '8 bytes, "
                                         r"sha256 11' there, '9 bytes, sha256 00' now\)"):
        refuse_other_arguments(str(tmp_path), now)
    (tmp_path / 'run.json').write_text(json.dumps(dict(config=dict(
        lr=0.5, test_every_epoch=True, test_file_content='2 bytes'))), encoding='utf-8')
    with pytest.raises(SystemExit, match=r"test_file_content: '2 bytes' there, '1 bytes' now"):
        refuse_other_arguments(str(tmp_path), dict(lr=0.5, test_every_epoch=True,
                                                   test_file_content='1 bytes'))


@pytest.mark.parametrize('content, reason', [
    ('{"config": {"lr": 0.5', 'Expecting'), ('[1, 2]', 'no "config" object in it'),
    ('{"command": "x"}', 'no "config" object in it'), (b'\xff{}', "codec can't decode")])
def test_a_run_json_that_is_no_record_is_one_line_where_a_model_was_trained(tmp_path, content,
                                                                            reason):
    """A run.json edited by hand, or another tool's, in a folder with a trained model: one line
    naming it (it was a KeyError or JSONDecodeError traceback); without finished work it is
    rewritten."""
    run = tmp_path / 'run'
    run.mkdir()
    (run / 'run.json').write_bytes(content if isinstance(content, bytes) else content.encode())
    RunLog(str(run), dict(lr=0.5), argv=[], program='test.py')      # nothing trained: rewritten
    assert json.loads((run / 'run.json').read_text())['config'] == dict(lr=0.5)
    (run / 'model').mkdir()
    (run / 'model' / 'model.h5').write_text('x', encoding='utf-8')
    (run / 'run.json').write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SystemExit) as exit_info:
        RunLog(str(run), dict(lr=0.5), argv=[], program='test.py')
    message = str(exit_info.value)
    assert message.startswith(f'{run}/run.json: cannot read the arguments of the run in {run} (')
    assert reason in message and message.endswith(
        '); choose another --output, or pass --overwrite to discard it')
    assert '\n' not in message
