"""Which sentences train, select and test a run: a benchmark's splits or the user's own files,
a seeded training sample, and a seeded development hold-out where no development split exists.

The epoch is selected on ``dev``; ``test`` is scored once, with the selected model. TensorFlow-free.

    >>> data = load_splits(train_file='data/char-bio/train.txt', dev_file='data/char-bio/dev.txt')
    >>> print(data.describe())
"""
import dataclasses
from typing import Optional

import numpy as np

from crf_lr.data.files import REPAIR_NOTE, DataFormatError, note_line, note_places, place_list
from crf_lr.data.formats import SEGMENTATION_FORMATS, detect_format, read_corpus
from crf_lr.data.benchmarks import dataset_spec, load_dataset
from crf_lr.decoding.spans import outermost

MAX_HOLDOUT = 500
# Below these sizes the summary says the scores mean little (a tried-out run of a few sentences).
FEW_TRAINING, FEW_DEVELOPMENT = 100, 20


@dataclasses.dataclass
class Splits:
    """The examples of a run.

    Attributes:
        train, dev: lists of ``crf_lr.data.files.Example``; test: such a list, or None when no
            labelled test split exists.
        types: entity types of the training data (sorted for user files).
        units: 'chars' or 'words'.
        nested: True when the training spans nest.
        names: dict role -> description of where its examples come from.
        repairs: Counter-like dict note -> count of tags repaired while reading.
        repaired_at: list of ``'path:line'`` str, every tag repaired (``Example.repaired_at``).
        files: dict role -> path of the file its examples were read from.
    """
    train: list
    dev: list
    test: Optional[list]
    types: tuple
    units: str
    nested: bool
    names: dict
    repairs: dict = dataclasses.field(default_factory=dict)
    repaired_at: list = dataclasses.field(default_factory=list)
    files: dict = dataclasses.field(default_factory=dict)

    def describe(self):
        """One line per role: how many sentences and from where; each kind of note counted with its
        first places, the conlleval repairs in one line."""
        lines = [f'{role}: {len(examples)} sentence{"s" * (len(examples) != 1)} from '
                 f'{self.names[role]}'
                 for role, examples in (('train', self.train), ('dev', self.dev),
                                        ('test', self.test)) if examples is not None]
        if self.test is None:
            lines.append(f'test: none ({self.names["test"]}); the dev score of the selected '
                         f'epoch is the final figure')
        few = [f'{len(part)} {role} sentence{"s" * (len(part) != 1)}'
               for role, part, least in (('training', self.train, FEW_TRAINING),
                                         ('development', self.dev, FEW_DEVELOPMENT))
               if len(part) < least]
        if few:
            lines.append(f'note: only {" and ".join(few)}: a model learns little from so few, '
                         f'and their scores change by chance from one run to the next')
        if self.units == 'chars' and _mostly_latin_words(self.train):
            lines.append('note: the training text is mostly Latin words, read one character at '
                         'a time (as JSON records and character-tag files are): a model of '
                         'characters; for one of words, write a word and its tag a line (CoNLL)')
        examples = [e for part in (self.train, self.dev, self.test) for e in part or ()]
        lines += [note_line(note, count, note_places(examples, note))
                  for note, count in sorted(self.repairs.items()) if note != REPAIR_NOTE]
        if self.repaired_at:
            lines.append(repair_line(self.repaired_at))
        return '\n'.join(lines)


def _mostly_latin_words(examples, sample=200):
    """True where the first ``sample`` examples' text is mostly Latin letters between spaces."""
    text = ''.join(example.text for example in examples[:sample])
    letters = sum(char.isascii() and char.isalpha() for char in text)
    return letters > len(text.replace(' ', '')) / 2 and text.count(' ') * 10 > letters


def repair_line(places, shown=3):
    """One line counting the tags repaired (by the conlleval rule, or BIOES typos in a BIO
    file) and naming the first places.

        >>> repair_line(['train.txt:1266', 'train.txt:1290'])
        'repaired 2 tags that broke their scheme (train.txt:1266, train.txt:1290); --strict refuses
        them'
    """
    return (f'repaired {len(places)} tag{"s" * (len(places) != 1)} that broke their scheme '
            f'({place_list(places, shown)}); --strict refuses them')


def _nested(examples):
    """True when some example's spans nest or overlap (flat tags cannot hold them all)."""
    return any(len(outermost(e.spans)) < len(e.spans) for e in examples)


def _repairs(*datasets):
    counts = {}
    for dataset in datasets:
        for example in dataset or ():
            for note in example.notes:
                counts[note] = counts.get(note, 0) + 1
    return counts


def _user_files(train_file, dev_file, test_file, format, repair, task):
    train = read_corpus(train_file, format=format, repair=repair)
    _check_task(train, task, detected=format is None)
    read = [read_corpus(path, format=format or _format_like(path, train), types=train.types,
                        repair=repair) if path else None for path in (dev_file, test_file)]
    for data in (train, *read):
        _check_labelled(data)
    names = {role: _named(path, data) for role, path, data in
             (('train', train_file, train), ('dev', dev_file, read[0]),
              ('test', test_file, read[1]))
             if path}
    names.setdefault('test', 'no --test-file given')
    return train, read[0], read[1], train.units, False, names


def _beside_benchmark(path, format, train, units, repair):
    """A user's dev or test file beside a benchmark's training split, and its name: read with the
    benchmark's types, in units (characters or words) the benchmark's model reads."""
    data = read_corpus(path, format=format, types=train.types, repair=repair)
    if data.units != units:
        raise DataFormatError(path, None, f'format {data.format} holds {data.units}, but the '
                                          f'benchmark {train.name} trains on {units}: give a '
                                          f'file of {units}')
    _check_labelled(data)
    return data, _named(path, data)


def _named(path, data):
    """How a split read from the user's file ``path`` is named in the summary and the results."""
    return f'{path} ({data.note or "format " + data.format})'


def _family(format):
    """Formats whose files hold the same kind of examples: character NER (the character-tag
    ones and JSON records, both spans over characters), the segmentation ones, conll."""
    return ('characters' if format in ('char-bio', 'char-bmes', 'char-bioes', 'jsonl') else
            'segmentation' if format in SEGMENTATION_FORMATS else format)


def _format_like(path, train):
    """The format to read a dev or test file in: its own, where it is of the training file's
    kind (a char-bioes or JSON dev file beside a char-bio training file; segmented beside
    char-seg). An error where the file's own format is of another kind (a char-bio dev file
    beside a segmented training file) or unclear (raw text beside a segmented training file)."""
    found = detect_format(path)
    if _family(found) != _family(train.format):
        raise DataFormatError(path, None, f'format {found} detected, but the training file '
                                          f'{train.path} is {train.format}: give the training, '
                                          f'dev and test files in one format')
    return found            # its own scheme: the spans, not the tags, are what the files share


def _check_task(data, task, detected):
    """A DataFormatError where the training file's format is another task's."""
    where = f'format {data.format}' + (' detected' if detected else '')
    if task == 'ner' and data.format in SEGMENTATION_FORMATS:
        tags = ("its nr/ns/nt part-of-speech tags mark names, but they are no NER training tags"
                if any(example.spans for example in data) else 'no entity tags')
        raise DataFormatError(data.path, None, f'{where}: word segmentation, {tags}; train it '
                                               'with examples/task_cws_crf.py, or give NER tags '
                                               '(docs/data.md)')
    if task == 'segmentation' and data.format not in SEGMENTATION_FORMATS:
        raise DataFormatError(data.path, None, f'{where}: entity tags; train NER with '
                                               'examples/task_ner.py. Word segmentation reads '
                                               'words between spaces (segmented) or characters '
                                               'with B/M/E/S tags (char-seg)')


def _check_benchmark_task(dataset, task):
    """A ValueError where the benchmark ``dataset`` is another task's."""
    spec = dataset_spec(dataset)
    if task and spec.task != task:
        script = 'task_cws_crf.py' if spec.task == 'segmentation' else 'task_ner.py'
        kind = 'word segmentation' if spec.task == 'segmentation' else 'NER'
        raise ValueError(f'{spec.name} is a {kind} benchmark: train it with examples/{script}')


def _check_labelled(data):
    """A DataFormatError naming the first record without entities (no "label", "spans" or
    "entities"): training, selecting and scoring all need them."""
    if data is not None:
        unlabelled = next((e for e in data if e.tags is None), None)
        if unlabelled is not None:
            raise DataFormatError(*unlabelled.source.rsplit(':', 1), 'a record without "label", '
                                  '"spans" or "entities": training, dev and test files need the '
                                  'entities of every record (an empty "label": {} where it has '
                                  'none)')


def _check_entities(train, name, types, train_limit, held_out):
    """A ValueError where the training sentences hold no entity: a tagger has nothing to learn
    (and a head of no types cannot be built). ``held_out``: the development split was taken out
    of the training file."""
    if not types:
        raise ValueError(f'{name}: no entity in the training file (every tag is O): nothing for '
                         f'a tagger to learn; give a file with entity tags')
    if not any(example.spans for example in train):
        takers = ([f'the --train-limit {train_limit} sample'] if train_limit else []) + (
            ['the development hold-out'] if held_out else [])
        raise ValueError(f'{name}: no entity is left in the {len(train)} training sentences '
                         f'({" and ".join(takers)} took every sentence with one): '
                         + ('raise --train-limit, ' if train_limit else '')
                         + 'give a --dev-file or another --sample-seed')


def _training_share(part, known):
    """What to add to a dev or test file's name where more than half its sentences are sentences
    of the training file (``known``: its sentences' tokens, as tuples; the same file given
    twice, or a copy): its scores are then on text the model may have trained on."""
    shared = sum(tuple(example.tokens) in known for example in part)
    if 2 * shared <= len(part):
        return ''
    return (f'; note: {shared} of its {len(part)} sentences are in the training file, so its '
            'scores are on text the model may have trained on')


def _check_scored(role, part, whole, name, eval_limit, held_out):
    """A ValueError where the development or test sentences (``part``: the first ``eval_limit``
    of ``whole``) hold no entity: every strict F1 on them is 0 (no epoch to select, a test score
    that says nothing)."""
    if part is None or any(example.spans for example in part):
        return
    limited = len(part) < len(whole)
    what = ('no epoch can be selected on it, and ' if role == 'dev' else '') + 'its F1 is 0'
    remedy = ('give a --dev-file or another --sample-seed' if held_out else
              f'give a {role} file with entity tags'
              + (', or raise --eval-limit' if any(example.spans for example in whole) else ''))
    raise ValueError(f'the {role} split ({name}) holds no entity in its {len(part)} sentences'
                     + (f' (the first {eval_limit}: --eval-limit)' if limited else '')
                     + f': {what} whatever the model predicts; {remedy}')


def _benchmark(dataset, data_dir, repair):
    spec = dataset_spec(dataset)
    train = load_dataset(spec.name, spec.train, data_dir, repair)
    dev = load_dataset(spec.name, spec.dev, data_dir, repair) if spec.dev else None
    try:
        test = load_dataset(spec.name, spec.test, data_dir, repair) if spec.test else None
    except FileNotFoundError as error:
        print(f'no test split: {error}')
        test = None
    names = {role: f'{spec.name}/{data.split}' + (f' ({data.note})' if data.note else '')
             for role, data in (('train', train), ('dev', dev), ('test', test)) if data is not None}
    names.setdefault('test', f'{spec.name} has no labelled test split' if not spec.test else
                     f'{spec.name}/{spec.test} is not available: pass --data-dir or set '
                     f'CRF_LR_DATA')
    return train, dev, test, spec.units, spec.nested, names


def load_splits(dataset=None, train_file=None, dev_file=None, test_file=None, format=None,
                repair=True, data_dir=None, train_limit=None, eval_limit=None, holdout=None,
                sample_seed=0, task=None):
    """The train / dev / test examples of a run.

    Args:
        dataset: a benchmark name (``crf_lr.data.benchmarks.DATASETS``), or None with
        ``train_file``. train_file, dev_file, test_file: the user's own files (read by
            ``crf_lr.data.formats.read_corpus``; types come from the training file).
        format: the files' format, or None to detect it (the training file's; a dev or test
            file of another kind of format is an error).
        repair: True (the default): repair messy tags by the conlleval rule; False: reject them.
        data_dir: the benchmark data folder (default ``$CRF_LR_DATA``).
        train_limit: a seeded sample of this many training sentences (in corpus order).
        eval_limit: only the first N development and test sentences.
        holdout: size of the development hold-out when no development split exists (default:
            10% of the training data, at most 500). It is taken from the END of the seeded
            permutation whose start gives the training sample, so adding it does not change
            which sentences train.
        sample_seed: seed of the sample and the hold-out.
        task: 'ner' or 'segmentation': the user's training file must be in one of that task's
            formats (an error saying which script to use otherwise), and for 'ner' its training
            sentences must hold an entity. None: any.
    Returns:
        :class:`Splits`. Raises ValueError before any training when a split is empty or the
        hold-out leaves no training sentence.

        >>> data = load_splits('msra', train_limit=300)
        >>> len(data.train), len(data.dev)        # (300, 500): dev held out of MSRA train
    """
    if train_file:
        train, dev, test, units, nested, names = _user_files(train_file, dev_file, test_file,
                                                             format, repair, task)
    elif dataset:
        _check_benchmark_task(dataset, task)
        train, dev, test, units, nested, names = _benchmark(dataset, data_dir, repair)
        if dev_file:
            dev, names['dev'] = _beside_benchmark(dev_file, format, train, units, repair)
        if test_file:
            test, names['test'] = _beside_benchmark(test_file, format, train, units, repair)
    else:
        raise ValueError('load_splits needs a dataset name or a train_file')
    types, nested = tuple(train.types), nested or _nested(train)
    files = {role: data.path for role, data in (('train', train), ('dev', dev), ('test', test))
             if data is not None}
    examples = list(train)
    order = np.random.default_rng(sample_seed).permutation(len(examples))
    held_out = dev is None
    if held_out:
        size = holdout or min(MAX_HOLDOUT, max(1, len(examples) // 10))
        if size >= len(examples):
            raise ValueError(f'{names["train"]}: cannot hold out {size} of {len(examples)} '
                             f'training sentences for development; give a development file '
                             f'or a smaller --holdout')
        dev = [examples[i] for i in sorted(order[len(order) - size:])]
        order = order[:len(order) - size]
        names['dev'] = (f'a seeded hold-out of {names["train"]} (sample seed {sample_seed}): '
                        f'no development split')
    train = [examples[i] for i in sorted(order[:train_limit])]
    whole = {'dev': list(dev), 'test': None if test is None else list(test)}
    dev = whole['dev'][:eval_limit]
    test = None if test is None else whole['test'][:eval_limit]
    known = {tuple(example.tokens) for example in examples} if dev_file or test_file else None
    for role, part, path in (('dev', dev, dev_file), ('test', test, test_file)):
        names[role] += _training_share(part, known) if path else ''
    for role, part in (('train', train), ('dev', dev), ('test', test)):
        if part is not None and not part:
            raise ValueError(f'the {role} split ({names[role]}) holds no sentence')
    if task == 'ner':
        _check_entities(train, names['train'], types, train_limit, held_out)
        for role, part in (('dev', dev), ('test', test)):
            _check_scored(role, part, whole[role], names[role], eval_limit,
                          held_out and role == 'dev')
    repairs = _repairs(train, dev, test)                  # of the sentences the run uses
    repaired_at = [place for part in (train, dev, test) for e in part or ()
                   for place in e.repaired_at]
    return Splits(train, dev, test, types, units, nested, names, repairs, repaired_at, files)
