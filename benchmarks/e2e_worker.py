"""One side of the end-to-end benchmark in a process of its own (so its peak RSS is its own):
train on a job's epochs, predict its test batches, time a fixed step; one JSON line out.

    $ python benchmarks/e2e_worker.py JOB.pkl '{"side": "torch", "head": "crf",
          "precision": "float32", "threads": 2, "step_calls": 5, "predict_passes": 3}'

Sides: ``crf_lr`` (``e2e_keras.KerasSide``: ``examples/task_ner.py``'s model, trained through
``crf_lr.training.loop.train_steps`` or, with ``"step": "train_on_batch"``, Keras's
``train_on_batch``) and ``torch`` (``e2e_torch.TorchSide``: ``transformers`` + ``pytorch-crf``). A
side has ``train(batches)`` (yields each step's loss), ``predict(inputs)`` (label-id paths of a
batch, one per window) and ``loss(inputs, labels)`` / ``seen(inputs, labels)`` (step-0 loss without
dropout, and the piece mask and labels the model sees: for the parity test).
"""
import json
import os
import pickle
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def make_side(job, config):
    """The side named by ``config['side']``, built on ``job`` (threads pinned first)."""
    if config['side'] == 'torch':
        from e2e_torch import TorchSide
        return TorchSide(job, config['head'], config['precision'], config['threads'])
    from e2e_keras import KerasSide
    return KerasSide(job, config['head'], config['precision'], config['threads'],
                     config.get('step', 'train_steps'))


def timed(iterable):
    """Seconds between successive items of ``iterable`` (the first from the call), and the items."""
    times, items, started = [], [], time.perf_counter()
    for item in iterable:
        now = time.perf_counter()
        times.append(now - started)
        items.append(item)
        started = now
    return times, items


def predict_seconds(side, batches):
    """Seconds ``side`` takes to predict ``batches``, one after another."""
    started = time.perf_counter()
    for inputs in batches:
        side.predict(inputs)
    return time.perf_counter() - started


def measure(side, job, step_calls, predict_passes):
    """Everything the benchmark reports of one side (a JSON-serialisable dict). Prediction is
    timed over ``predict_passes`` whole passes per batch size after a warm one; the reported rate
    is their median (every pass's rate is kept)."""
    epochs, losses = [], []
    for batches in job['epochs']:
        times, step_losses = timed(side.train(batches))
        if not np.all(np.isfinite(step_losses)):
            raise FloatingPointError(f'a loss is not finite: {step_losses}')
        epochs.append(round(sum(times), 3))
        losses.append(round(float(np.mean(step_losses)), 5))
    paths = [side.predict(inputs) for inputs in job['predict'][32]]      # warm-up, and the F1's
    passes = {}
    for size, batches in job['predict'].items():
        side.predict(batches[0])
        sentences = job['predict_sentences'][size]
        passes[str(size)] = [round(sentences / predict_seconds(side, batches), 2)
                             for _ in range(predict_passes)]
    step_times, _ = timed(side.train([job['step_batch']] * (step_calls + 1)))
    return dict(epoch_s=epochs, epoch_loss=losses, paths=[[list(map(int, p)) for p in batch]
                                                          for batch in paths],
                predict_sentences_per_s={k: float(np.median(v)) for k, v in passes.items()},
                predict_passes_sentences_per_s=passes,
                step_ms=[round(t * 1e3, 1) for t in step_times[1:]],
                peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                load_average=[round(x, 2) for x in os.getloadavg()])


def main():
    import argparse
    parser = argparse.ArgumentParser(description='One side of end_to_end.py in a process of its '
                                                 'own (end_to_end.py starts it).')
    parser.add_argument('job', help="a job pickle end_to_end.py wrote")
    parser.add_argument('config', type=json.loads, help='the side as JSON: side, head, '
                        'precision, threads, step_calls, predict_passes')
    arguments = parser.parse_args()
    job_path, config = arguments.job, arguments.config
    with open(job_path, 'rb') as f:
        job = pickle.load(f)
    side = make_side(job, config)
    print(json.dumps(dict(config, **measure(side, job, config.get('step_calls', 5),
                                             config.get('predict_passes', 3)))))


if __name__ == '__main__':
    main()
