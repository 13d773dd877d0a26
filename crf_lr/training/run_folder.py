"""The run folder: arguments, the per-epoch log, results and checkpoints (`RunLog`), all written
atomically; the machine a run ran on.
"""
import hashlib
import json
import os
import platform
import shlex
import shutil
import sys
import time

from crf_lr.speed import threads
from crf_lr.utils.atomic import atomic_write, recover_folder


def command_line(argv=None, program=None):
    """The command line of a run, shell-quoted: ``python <program> <argv>`` (default: this
    process's own), the program path relative to the working folder."""
    argv = sys.argv[1:] if argv is None else argv
    program = program or sys.argv[0]
    if program.endswith('.py'):
        program = 'python ' + shlex.quote(os.path.relpath(program))
    return ' '.join([program] + [shlex.quote(a) for a in argv])


def machine():
    """A short description of the machine: its CPU cores (those the run may use, and the CPU
    quota, where fewer: :func:`crf_lr.speed.threads.describe`) and model, platform, Python.

        >>> machine()
        '2 CPU cores (AMD EPYC), Linux 6.18.44, Python 3.11.7'
    """
    return (f'{threads.describe()} ({cpu_model()}), '
            f'{platform.system()} {platform.release()}, Python {platform.python_version()}')


# Arm cores by (CPU implementer, CPU part) as /proc/cpuinfo gives them: those of the Arm servers
# in common use (AWS Graviton 2-4, Ampere Altra, NVIDIA Grace), and the Cortex-A72 of Graviton 1
ARM_CORES = {('0x41', '0xd08'): 'Arm Cortex-A72', ('0x41', '0xd0c'): 'Arm Neoverse N1',
             ('0x41', '0xd40'): 'Arm Neoverse V1', ('0x41', '0xd49'): 'Arm Neoverse N2',
             ('0x41', '0xd4f'): 'Arm Neoverse V2'}


def cpuinfo_fields(cpuinfo='/proc/cpuinfo'):
    """``{field: value}`` of ``cpuinfo`` (a Linux ``/proc/cpuinfo``-format file), the first CPU's
    value of each; empty where the file cannot be read.

        >>> cpuinfo_fields()['cpu family']
        '25'
    """
    fields = {}
    try:
        with open(cpuinfo, encoding='utf-8', errors='replace') as f:
            for line in f:
                key, _, value = line.partition(':')
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model(cpuinfo='/proc/cpuinfo'):
    """The CPU's model name as ``cpuinfo`` gives it (e.g. 'AMD EPYC'); on Arm, which gives none,
    the core its ``CPU implementer`` and ``CPU part`` name (e.g. 'Arm Neoverse V1', else 'Arm
    CPU part 0xd81 (implementer 0x41)'); else the architecture (``platform.machine()``).

        >>> cpu_model()
        'AMD EPYC'
    """
    fields = cpuinfo_fields(cpuinfo)
    if fields.get('model name'):
        return fields['model name']
    core = fields.get('CPU implementer'), fields.get('CPU part')
    if None not in core:
        return ARM_CORES.get(core, f'Arm CPU part {core[1]} (implementer {core[0]})')
    return platform.processor() or platform.machine()


# Flags that may change between a run and its resumption.
RESUMABLE_CHANGES = ('epochs', 'output', 'overwrite', 'data_dir', 'verbose', 'stop_gain',
                     'stop_epochs', 'test_file', 'test_file_content')   # the test selects nothing
_CONTENT = '_file_content'        # the keys of file_contents: a run.json before them has none


def file_contents(files):
    """``{'<role>_file_content': '<size> bytes, sha256 <first 16 hex digits>'}`` of each file of
    ``files`` (role -> path, as ``crf_lr.data.splits.Splits.files``): added to a run's arguments,
    so that a run folder whose training or dev file has changed since is not resumed.

        >>> file_contents({'train': 'data/char-bio/train.txt'})
        {'train_file_content': '... bytes, sha256 ...'}
    """
    contents = {}
    for role, path in files.items():
        digest = hashlib.sha256()
        with open(path, 'rb') as f:
            for block in iter(lambda: f.read(1 << 20), b''):
                digest.update(block)
        contents[f'{role}{_CONTENT}'] = (f'{os.path.getsize(path):,} bytes, sha256 '
                                         f'{digest.hexdigest()[:16]}')
    return contents


def _shown(value):
    """An argument's value in a message: None (the default chosen at run time) as 'not given'."""
    return 'not given' if value is None else repr(value)


def _trained(output):
    """``(checkpointed, saved)``: whether ``output`` holds a finished epoch's checkpoint, a
    saved model."""
    model_dir = os.path.join(output, 'model')
    return (os.path.exists(os.path.join(output, 'checkpoint', 'last.index')),
            os.path.isdir(model_dir) and bool(os.listdir(model_dir)))


def recorded_arguments(output):
    """The arguments ``output``'s ``run.json`` records, or None where it has none.

    Raises:
        SystemExit naming the file where it is no run's record (edited by hand, or another
        tool's).

        >>> recorded_arguments('runs/ner')['lr']
    """
    run_path = os.path.join(output, 'run.json')
    if not os.path.exists(run_path):
        return None
    try:
        with open(run_path, encoding='utf-8') as f:
            record = json.load(f)
    except (OSError, ValueError) as error:          # ValueError: not JSON, or not UTF-8
        reason = error
    else:
        config = record.get('config') if isinstance(record, dict) else None
        if isinstance(config, dict):
            return config
        reason = 'no "config" object in it'
    raise SystemExit(f'{run_path}: cannot read the arguments of the run in {output} ({reason}); '
                     f'choose another --output, or pass --overwrite to discard it')


def refuse_other_arguments(output, config):
    """Raise ``SystemExit`` naming the differing arguments where ``output`` holds a trained run
    (its epochs or model) made with other arguments than ``config``, but those in
    ``RESUMABLE_CHANGES`` (the test file's not where each epoch is tested: its log would hold
    two files' scores). The scripts call it once their data is read, before they load an
    encoder, so that the refusal comes at once; :class:`RunLog` checks again.

    Returns:
        the trained run's recorded arguments (:func:`recorded_arguments`), or None where
        ``output`` holds no trained run.

        >>> refuse_other_arguments('runs/ner', dict(vars(args), script='task_ner'))
    """
    if not any(_trained(output)):
        return None            # a run stopped before its first epoch: its arguments may change
    previous = recorded_arguments(output)
    if previous is None:
        return None
    resumable = (RESUMABLE_CHANGES if not config.get('test_every_epoch') else  # a log of 2 tests
                 [k for k in RESUMABLE_CHANGES if not k.startswith('test_file')])
    changed = sorted(k for k in set(previous) | set(config)
                     if k not in resumable and previous.get(k) != config.get(k)
                     and (k in previous or not k.endswith(_CONTENT)))
    if changed:
        raise SystemExit(
            f'{output} holds a trained run (its epochs or model) made with other arguments ('
            + ', '.join(f'{k}: {_shown(previous.get(k))} there, {_shown(config.get(k))} now'
                        for k in changed)
            + '); choose another --output, or pass --overwrite to discard it')
    return previous


def _tested_alike(previous, config):
    """True where a trained run's recorded arguments ``previous`` (None: no trained run) name the
    test file ``config`` names, with the same content where recorded: its test scores, if any,
    are of this test."""
    if previous is None:
        return False
    keys = ['test_file'] + [key for key in ['test' + _CONTENT] if key in previous]
    return all(previous.get(key) == config.get(key) for key in keys)


class RunLog:
    """The output folder of a run and its resumable record.

    Files: ``run.json`` (the arguments and command), ``log.jsonl`` (one JSON record per
    finished epoch), ``results.json`` (the summary, rewritten after every epoch),
    ``checkpoint/`` (model and optimiser state of the last finished epoch, written by
    :func:`fit`), ``model/`` (the best model so far and its label map). Each is written
    atomically (:mod:`crf_lr.utils.atomic`): a kill leaves the old version or the new one, whole.

    Args:
        output: folder path (created).
        config: dict of the run's arguments (JSON-serialisable).
        overwrite: True discards a previous run in ``output``; False resumes it, which requires
            the same arguments except those in ``RESUMABLE_CHANGES``.
        argv, program: the run's arguments and script path, for the recorded command (default:
            this process's command line).
    Raises:
        SystemExit with a message naming the differing arguments.

        >>> run = RunLog('runs/cws', vars(args))
        >>> start_epoch = run.finished_epochs
    """

    def __init__(self, output, config, overwrite=False, argv=None, program=None):
        self.output = output
        self.config = dict(config)
        self.log_path = os.path.join(output, 'log.jsonl')
        self.run_path = os.path.join(output, 'run.json')
        self.results_path = os.path.join(output, 'results.json')
        self.checkpoint_dir = os.path.join(output, 'checkpoint')
        self.checkpoint_prefix = os.path.join(self.checkpoint_dir, 'last')
        self.model_dir = os.path.join(output, 'model')
        for folder in (self.checkpoint_dir, self.model_dir):
            recover_folder(folder)                  # a kill between a swap's two renames
        if overwrite and os.path.isdir(output):
            for name in ('log.jsonl', 'run.json', 'results.json'):
                if os.path.exists(os.path.join(output, name)):
                    os.remove(os.path.join(output, name))
            for folder in (self.checkpoint_dir, self.model_dir):
                shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(output, exist_ok=True)
        self.records = self._read_log()
        self.tested_alike = _tested_alike(refuse_other_arguments(output, self.config),
                                          self.config)
        checkpointed, _ = _trained(output)
        if self.records and not checkpointed:
            self.records = []     # a log without its checkpoint cannot be resumed: start afresh
        self.started = time.time()
        self.command = command_line(argv, program)
        with atomic_write(self.run_path) as f:
            json.dump(dict(config=self.config, command=self.command, machine=machine()), f,
                      ensure_ascii=False, indent=1)
        self._rewrite_log()

    def model_line(self):
        """The line that ends a run: where its model is and how to predict with it."""
        return (f'the model is in {self.model_dir}: python -m crf_lr.predict {self.model_dir} '
                f'your_text.txt')

    def _read_log(self):
        if not os.path.exists(self.log_path):
            return []
        records = []
        with open(self.log_path, encoding='utf-8') as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    break          # a line cut by an interruption ends the usable log
        return records

    def _rewrite_log(self):
        with atomic_write(self.log_path) as f:
            for record in self.records:
                f.write(json.dumps(record, ensure_ascii=False) + '\n')

    @property
    def finished_epochs(self):
        """Number of epochs already finished (and checkpointed)."""
        return len(self.records)

    def truncate(self, epochs):
        """Keep only the records of the first ``epochs`` epochs (those the checkpoint holds)."""
        self.records = self.records[:epochs]
        self._rewrite_log()

    def append(self, record):
        """Add one epoch's record (a JSON-serialisable dict) to ``log.jsonl`` (rewritten whole:
        a kill leaves the log with or without the record, never a torn line)."""
        record = dict(record, time=time.strftime('%Y-%m-%d %H:%M:%S'))
        self.records.append(record)
        self._rewrite_log()

    def best(self, metric):
        """The record with the highest ``metric`` (None before the first epoch)."""
        scored = [r for r in self.records if r.get(metric) is not None]
        return max(scored, key=lambda r: r[metric]) if scored else None

    def write_results(self, metric, /, **extra):
        """Rewrite ``results.json``: command, machine, arguments, the precision computed in
        (what ``--precision auto`` became), every epoch, the best one, then ``extra``'s other
        entries (those named as one of these are written afresh: ``extra`` may be the results
        returned before).

            >>> run.write_results('dev_f1', **dict(results, calibration=report))
        """
        from crf_lr.model.precision import policy_name
        best = self.best(metric)
        results = dict(command=self.command, machine=machine(), config=self.config,
                       precision_used=policy_name(),
                       metric=metric, epochs=[{k: v for k, v in r.items() if k != 'step_losses'}
                                              for r in self.records],
                       best_epoch=best and best['epoch'], best=best and best.get(metric),
                       first_epoch=self.records[0].get(metric) if self.records else None)
        results.update((key, value) for key, value in extra.items() if key not in results)
        with atomic_write(self.results_path) as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
        return results
