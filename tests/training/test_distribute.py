"""Training on several replicas (``crf_lr.training.distribute``, ``--strategy``) gives the losses of
one device for the same global batches, and the training step is traced once.

Oracles: one device. ``mirrored`` runs on two logical CPU devices, which must be configured before
TensorFlow starts its devices, so in a process of its own (this file run as a script);
``multiworker`` runs ``examples/task_ner.py`` as two worker processes on loopback ports
(``TF_CONFIG``) beside a one-device run of the same command. Every process is time-bounded.
Global batches split evenly between the replicas: with an uneven split (a smaller last batch),
each replica's mean loss weighs its own rows (docs/distribute.md), which one device does not do.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from helpers.paths import REPO, TESTS

ROOT = str(REPO)
TIMEOUT = 600             # seconds per process; they take 1-2 minutes on 2 busy cores
SEQUENCE_HEADS = ('crf', 'global_pointer', 'efficient_global_pointer')   # a loss per sentence


def _environment(**extra):
    return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(TESTS)]),  # tests/: helpers
                TF_CPP_MIN_LOG_LEVEL='2', **extra)


def mirrored_losses():
    """In a fresh process: the step losses of each head in ``SEQUENCE_HEADS`` on one device and
    under ``make_strategy('mirrored')`` over two logical CPUs, from the same initial weights, over
    batches of 4 and 2 sentences of several lengths; and the mirrored step's trace count."""
    from crf_lr.compat import tf
    cpu = tf.config.list_physical_devices('CPU')[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from crf_lr.training.distribute import make_strategy, strategy_line
    from crf_lr.training.loop import train_steps
    from helpers.step_cases import head_model, random_batches
    strategy = make_strategy('mirrored')
    print(strategy_line(strategy))
    results = dict(replicas=strategy.num_replicas_in_sync)
    for name in SEQUENCE_HEADS:
        one, head = head_model(name)
        epochs = [random_batches(head, sentences, 4, seed) for seed,
                  sentences in ((0, 16), (1, 14))]
        with strategy.scope():
            mirrored, _ = head_model(name)
        results[name] = dict(
            one=[loss for batches in epochs for loss in train_steps(one, batches)],
            mirrored=[loss for batches in epochs for loss in train_steps(mirrored, batches)],
            shapes=sorted({inputs[0].shape for batches in epochs for inputs, _ in batches}),
            traces=mirrored.train_function.experimental_get_tracing_count())
    return results


@pytest.fixture(scope='module')
def mirrored():
    done = subprocess.run([sys.executable, os.path.abspath(__file__), 'mirrored'],
                          env=_environment(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'strategy: mirrored, 2 replicas' in done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('name', SEQUENCE_HEADS)
def test_mirrored_on_two_devices_gives_the_one_device_losses(mirrored, name):
    assert mirrored['replicas'] == 2
    losses = mirrored[name]
    assert len(losses['one']) == 8
    np.testing.assert_allclose(losses['mirrored'], losses['one'], rtol=1e-5)


def test_the_mirrored_step_is_traced_once_for_every_batch_shape(mirrored):
    for name in SEQUENCE_HEADS:
        assert len(mirrored[name]['shapes']) >= 5 and mirrored[name]['traces'] == 1


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _write_tiny_encoder(folder):
    """A 1-layer, hidden-16 BERT config without dropout, and a vocab.txt of the char-bio sample's
    characters beside it."""
    chars = set()
    for split in ('train', 'dev', 'test'):
        with open(os.path.join(ROOT, 'data', 'char-bio', f'{split}.txt'), encoding='utf-8') as f:
            chars |= {line.split()[0] for line in f if line.strip()}
    vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + sorted(chars)
    (folder / 'vocab.txt').write_text('\n'.join(vocab) + '\n', encoding='utf-8')
    config = dict(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=32, hidden_act='gelu',
                  max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    (folder / 'bert_config.json').write_text(json.dumps(config))
    return str(folder / 'bert_config.json')


def _step_losses(output):
    with open(os.path.join(output, 'log.jsonl'), encoding='utf-8') as f:
        return [loss for line in f for loss in json.loads(line)['step_losses']]


def test_the_default_strategy_line_and_an_unknown_name():
    from crf_lr.training.distribute import make_strategy, strategy_line
    assert (strategy_line(make_strategy('default'))
            == 'strategy: default, 1 replica (the device TensorFlow places it on)')
    with pytest.raises(ValueError, match="strategy 'tpu': expected one of default, mirrored"):
        make_strategy('tpu')


def test_two_workers_finish_agree_and_train_like_one_device(tmp_path):
    """The NER script as two multi-worker processes and as one: 16 training sentences in global
    batches of 4, two epochs; only the chief writes the run folder."""
    data = os.path.join(ROOT, 'data', 'char-bio')
    command = [sys.executable, os.path.join(ROOT, 'examples', 'task_ner.py'),
               '--train-file', f'{data}/train.txt', '--dev-file', f'{data}/dev.txt',
               '--encoder', _write_tiny_encoder(tmp_path), '--train-limit', '16', '--epochs', '2',
               '--batch-size', '4', '--maxlen', '64', '--lr', '1e-2',
               '--precision', 'float32']        # bf16 (auto) rounds differently per replica
    workers = [f'127.0.0.1:{port}' for port in _free_ports(2)]
    processes = [subprocess.Popen(
        command + ['--strategy', 'multiworker', '--output', str(tmp_path / 'cluster')],
        env=_environment(TF_CONFIG=json.dumps(dict(cluster=dict(worker=workers),
                                                   task=dict(type='worker', index=index)))),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for index in (0, 1)]
    processes.append(subprocess.Popen(command + ['--output', str(tmp_path / 'one')],
                                      env=_environment(), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in processes]
    finally:
        for p in processes:
            p.kill()
    for p, output in zip(processes, outputs):
        assert p.returncode == 0, output[-3000:]
    assert 'strategy: multiworker, 2 replicas on 2 workers; this is worker 0 (chief)' in outputs[0]
    assert 'this is worker 1 (/job:worker/' in outputs[1]
    chief, other = tmp_path / 'cluster', tmp_path / 'cluster' / 'workertemp_1'
    assert (chief / 'model' / 'model.h5').is_file() and (other / 'log.jsonl').is_file()
    with open(chief / 'run.json', encoding='utf-8') as f:
        assert json.load(f)['config']['strategy'] == 'multiworker'
    one = _step_losses(tmp_path / 'one')
    assert len(one) == 8
    assert _step_losses(chief) == _step_losses(other)
    np.testing.assert_allclose(_step_losses(chief), one, rtol=1e-5, atol=1e-5)


if __name__ == '__main__':
    import crf_lr  # noqa: F401  (environment before TensorFlow)
    print(json.dumps({'mirrored': mirrored_losses}[sys.argv[1]](), default=list))
