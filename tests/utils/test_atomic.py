"""Writes that a kill cannot tear (crf_lr/utils/atomic.py), and a real training run killed (SIGKILL)
inside each of its writes.

Oracles: the files as they were before a failed write; for the kill test, an uninterrupted run of
the same command (its final model and checkpoint weights, its per-epoch losses and scores).
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from crf_lr.utils.atomic import atomic_write, recover_folder, replace_folder
from crf_lr.serving.model_folder import check_model_folder
from helpers.tiny_models import TINY_BERT_CONFIG
from helpers.paths import REPO

ROOT = str(REPO)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / 'results.json'
    path.write_text('old')
    with pytest.raises(RuntimeError):
        with atomic_write(str(path)) as f:
            f.write('new, half written')
            raise RuntimeError('killed')
    assert path.read_text() == 'old' and os.listdir(tmp_path) == ['results.json']
    with atomic_write(str(path)) as f:
        f.write('new')
    assert path.read_text() == 'new' and os.listdir(tmp_path) == ['results.json']


def test_a_failed_folder_write_leaves_the_previous_folder_whole(tmp_path):
    folder = tmp_path / 'model'
    folder.mkdir()
    (folder / 'model.h5').write_text('best so far')
    with pytest.raises(RuntimeError):
        with replace_folder(str(folder)) as scratch:
            with open(os.path.join(scratch, 'model.h5'), 'w') as f:
                f.write('half')
            raise RuntimeError('killed')
    assert os.listdir(tmp_path) == ['model'] and (folder / 'model.h5').read_text() == 'best so far'
    with replace_folder(str(folder)) as scratch:
        with open(os.path.join(scratch, 'labels.json'), 'w') as f:
            f.write('{}')
    assert os.listdir(tmp_path) == ['model'] and os.listdir(folder) == ['labels.json']


@pytest.mark.parametrize('state', ['set-aside', 'swapped', 'partial'])
def test_recovery_after_a_kill_at_each_stage_of_a_folder_swap(tmp_path, state):
    """Killed between the two renames (the old folder set aside, the new one not in place): the
    old one comes back. Killed after them: the leftover goes. Killed while writing: the partial
    copy of the dead process goes, the folder stays."""
    folder, previous = tmp_path / 'model', tmp_path / '.model.previous'
    dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True).stdout.strip()
    partial = tmp_path / f'.model.partial-{dead}'
    partial.mkdir()
    (partial / 'model.h5').write_text('new')
    if state == 'set-aside':
        previous.mkdir()
        (previous / 'model.h5').write_text('old')
    else:
        folder.mkdir()
        (folder / 'model.h5').write_text('new' if state == 'swapped' else 'old')
        if state == 'swapped':
            previous.mkdir()
    recover_folder(str(folder))
    assert os.listdir(tmp_path) == ['model']
    assert (folder / 'model.h5').read_text() == ('new' if state == 'swapped' else 'old')


# ---------------------------------------------------------------------------------------------
# A real training run, killed inside each write

# Each run resumes what the previous one left, and is stopped (CRF_LR_PAUSE_AT,
# crf_lr/utils/atomic.py)
# then SIGKILLed at the K-th time it reaches NAME:STAGE; the last run finishes. Epoch 2 improves
# the dev score (at the rate of _command; the test asserts it), so its model replaces epoch 1's
# (the case where a kill used to erase the model).
KILLS = [
    'model:writing:2',         # epoch 2's better model written aside; epoch 1's still in place
    'model:swapping:1',        # resumed after epoch 1: epoch 1's model set aside, epoch 2's not in
    'log.jsonl:writing:3',     # resumed again (log rewritten, truncated): epoch 2's record aside
    'checkpoint:swapping:1',   # epoch 2's checkpoint: epoch 1's set aside, the new one not in
    'results.json:writing:2',  # resumed after epoch 1 once more: epoch 2's results aside
]


def _command(output, encoder):
    """The CWS script on the data/ sample, a 1-layer hidden-16 random BERT without dropout (its
    random stream is not checkpointed: with dropout a resumed run differs), 2 epochs."""
    data = os.path.join(ROOT, 'data', 'segmented')
    return [sys.executable, os.path.join(ROOT, 'examples', 'task_cws_crf.py'),
            '--train-file', os.path.join(data, 'train.txt'),
            '--dev-file', os.path.join(data, 'dev.txt'), '--encoder', encoder,
            '--epochs', '2', '--batch-size', '8', '--maxlen', '32', '--lr', '2e-2',
            '--output', output]


def _start(command, pause_at=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', MPLBACKEND='Agg')
    env['PYTHONPATH'] = os.pathsep.join([ROOT] + [p for p in [env.get('PYTHONPATH')] if p])
    env.pop('CRF_LR_PAUSE_AT', None)
    if pause_at:
        env['CRF_LR_PAUSE_AT'] = pause_at
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _kill_at(command, point):
    """Run ``command`` until it stops at ``point``, then SIGKILL it."""
    process = _start(command, point)
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith('CRF_LR_PAUSED'):
            assert line.split()[1] == point, line
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, ''.join(seen[-30:])


def _model_weights(folder):
    import h5py
    with h5py.File(os.path.join(folder, 'model.h5'), 'r') as f:
        weights = {}
        f['model_weights'].visititems(
            lambda name, item: weights.update({name: item[()]}) if isinstance(item, h5py.Dataset)
            else None)
    return weights


def _checkpoint_values(output):
    from crf_lr.compat import tf
    reader = tf.train.load_checkpoint(os.path.join(output, 'checkpoint', 'last'))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != '_CHECKPOINTABLE_OBJECT_GRAPH'}


def _records(output):
    with open(os.path.join(output, 'log.jsonl'), encoding='utf-8') as f:
        return [json.loads(line) for line in f]


def _check_every_file_present_loads(output):
    """What a reader or the rerun finds: every JSON file parses, the model folder (after the
    recovery a reader does) passes the check and its weights read, the checkpoint reads whole;
    a model exists once an epoch is logged."""
    for name in ('run.json', 'results.json'):
        if os.path.exists(os.path.join(output, name)):
            with open(os.path.join(output, name), encoding='utf-8') as f:
                json.load(f)
    records = _records(output) if os.path.exists(os.path.join(output, 'log.jsonl')) else []
    model_dir = os.path.join(output, 'model')
    recover_folder(model_dir)
    if records or os.path.isdir(model_dir):
        check_model_folder(model_dir)
        assert _model_weights(model_dir)
    recover_folder(os.path.join(output, 'checkpoint'))
    if os.path.isdir(os.path.join(output, 'checkpoint')):
        assert _checkpoint_values(output)


@pytest.mark.slow
def test_a_run_killed_inside_each_write_resumes_to_the_uninterrupted_result(tmp_path):
    folder = os.path.join(ROOT, 'data', 'segmented')
    chars = {c for name in os.listdir(folder)
             for c in open(os.path.join(folder, name), encoding='utf-8').read() if c.strip()}
    vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + sorted(chars)
    (tmp_path / 'vocab.txt').write_text('\n'.join(vocab) + '\n', encoding='utf-8')
    encoder = tmp_path / 'bert_config.json'
    encoder.write_text(json.dumps(dict(TINY_BERT_CONFIG, vocab_size=len(vocab),
                                       num_hidden_layers=1, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0)))
    straight = str(tmp_path / 'straight')
    reference = _start(_command(straight, str(encoder)))          # alongside the killed runs
    output = str(tmp_path / 'killed')
    command = _command(output, str(encoder))
    for point in KILLS:
        _kill_at(command, point)
        _check_every_file_present_loads(output)
    finished = _start(command)
    for process in (finished, reference):
        assert process.wait(timeout=300) == 0, process.stderr.read()[-3000:]
    assert sorted(os.listdir(os.path.join(output, 'model'))) == ['labels.json', 'model.h5',
                                                                 'vocab.txt']
    assert not [name for name in os.listdir(output) if name.startswith('.')]    # no leftovers
    ours, theirs = _records(output), _records(straight)
    assert [r['epoch'] for r in ours] == [1, 2]
    for key in ('loss', 'dev_f1'):
        assert [r[key] for r in ours] == pytest.approx([r[key] for r in theirs], rel=1e-5), key
    assert sum((r['step_losses'] for r in ours), []) == pytest.approx(
        sum((r['step_losses'] for r in theirs), []), rel=1e-5)
    assert ours[1]['dev_f1'] > ours[0]['dev_f1']            # epoch 2's model replaced epoch 1's
    for got, want in ((_model_weights(os.path.join(output, 'model')),
                       _model_weights(os.path.join(straight, 'model'))),
                      (_checkpoint_values(output), _checkpoint_values(straight))):
        assert sorted(got) == sorted(want) and len(got) > 5
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7,
                                       err_msg=name)
