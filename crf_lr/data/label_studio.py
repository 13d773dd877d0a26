"""Label Studio's exports read as JSON records: its JSON tasks (``{"data": {...}, "annotations":
[{"result": [...]}]}``, or 0.x's ``"completions"``) and its JSON-MIN rows (``{"text", "label":
[{"start", "end", "text", "labels"}], "annotator", "annotation_id", ...}``, a row per
annotation). What is left out (other annotators' annotations, regions without a label, results
that label no span) is said in notes.
"""
from crf_lr.data.files import DataFormatError, listed
from crf_lr.data.tagging import echo

SKIPPED = 'crf_lr: why the reader skips the record'        # keys no file holds
NOTES = 'crf_lr: what reading the Label Studio task left out'
UNANNOTATED_NOTE = 'a Label Studio task without an annotation is skipped'
OTHER_ANNOTATIONS_NOTE = ('a Label Studio task with several annotations (annotators): the first '
                          'neither cancelled nor skipped read, the others left out')
ANNOTATED_AGAIN_NOTE = ("a JSON-MIN row of a Label Studio task already read (another "
                        "annotator's annotation, the same id) is skipped")
UTF16_NOTE = ("a Label Studio region whose offsets count UTF-16 code units (JavaScript's: a "
              'character outside the BMP, such as an emoji, counts 2) read at the characters they '
              'mean')
NO_LABEL_NOTE = 'a Label Studio region without a label ("labels": []) is left out'
# the keys of a JSON-MIN row that are no task data
_MIN_METADATA = frozenset(('id', 'annotator', 'annotation_id', 'created_at', 'updated_at',
                           'lead_time', 'agreement'))


def other_result_note(kind):
    """The note for a result of ``kind`` (a relation, choices) left out: it labels no span."""
    return (f'a Label Studio result of type {kind!r} is left out (only "labels" results, on '
            'text, are read)')


def other_min_note(key):
    """The note for a JSON-MIN row's ``key`` left out: objects that are no labelled text spans."""
    return (f'a JSON-MIN value {key!r} of objects that are no labelled text spans ("start", '
            '"end", "labels"), such as hypertext labels or choices, is left out')


def label_studio_records(values, path):
    """``(line, record)`` of ``values`` (such pairs of a JSON file), each Label Studio task or
    JSON-MIN row as ``{"text", "id", "entities": [{"start", "end", "type", "text"}]}`` with what
    was left out under :data:`NOTES`; a task without an annotation (a JSON-MIN row: its
    ``"annotation_id"`` null), or a JSON-MIN row of a task already read, as ``{"text", "id"}``
    with the note why under :data:`SKIPPED`. Other records as they are.

        >>> region = {'start': 0, 'end': 2, 'text': '李四', 'labels': ['PER']}
        >>> task = {'data': {'sentence': '李四'}, 'annotations': [{'result': [{'value': region}]}]}
        >>> next(label_studio_records([(1, task)], 'f.json'))
        (1, {'text': '李四', 'id': None, 'entities': [{...}], 'crf_lr: ...': []})
    """
    seen = set()
    for number, record in values:
        if not isinstance(record, dict):
            yield number, record
        elif 'text' not in record and isinstance(record.get('data'), dict):
            yield number, _task(record, path, number)
        elif 'annotation_id' in record or any(map(_regions, record.values())):
            row, task = _min_row(record, path, number), record.get('id')
            if record.get('annotation_id', 0) is None and not row['entities']:
                row = {'text': row['text'], 'id': task, SKIPPED: UNANNOTATED_NOTE}
            elif isinstance(task, (int, str)) and task in seen:
                row = {'text': row['text'], 'id': task, SKIPPED: ANNOTATED_AGAIN_NOTE}
            seen.add(task if isinstance(task, (int, str)) else None)
            yield number, row
        else:
            yield number, record


def _task(record, path, number):
    """A task of Label Studio's JSON export, read from its first annotation neither cancelled
    nor skipped."""
    annotations = [annotation for annotation in listed(record.get('annotations') or
                                                       record.get('completions') or [])
                   if isinstance(annotation, dict) and not annotation.get('was_cancelled')
                   and not annotation.get('skipped')]             # Label Studio 0.x's cancel
    results = listed(annotations[0].get('result')) if annotations else []
    spans = [_labels(result) is not None for result in results]
    regions = [result['value'] for result, span in zip(results, spans) if span]
    text = _task_text(record['data'], regions, path, number)
    if not annotations:                                 # not annotated yet: no training data
        return {'text': text, 'id': record.get('id'), SKIPPED: UNANNOTATED_NOTE}
    notes = [OTHER_ANNOTATIONS_NOTE] * (len(annotations) > 1) + [
        other_result_note(result.get('type', '?') if isinstance(result, dict) else '?')
        for result, span in zip(results, spans) if not span]
    return _read(text, record, regions, notes)


def _labels(result):
    """The labels of a result that labels a text span, else None."""
    value = result.get('value') if isinstance(result, dict) else None
    return value.get('labels') if isinstance(value, dict) else None


def _min_row(record, path, number):
    """A JSON-MIN row: the task's data, its id, the regions under each control tag's name, and
    the annotation's metadata (a row without regions: an annotation that found none); another
    control's objects (hypertext labels, choices) noted as left out."""
    keys = [key for key, value in record.items() if _regions(value)]
    regions = [region for key in keys for region in record[key]]
    data = {key: value for key, value in record.items()
            if key not in _MIN_METADATA and key not in keys}
    notes = [other_min_note(key) for key, value in data.items() if isinstance(value, list)
             and value and all(isinstance(item, dict) for item in value)]
    return _read(_task_text(data, regions, path, number), record, regions, notes)


def _read(text, record, regions, notes):
    """The record of a task's ``text`` and labelled ``regions``, a region without a label
    noted, and so is one whose offsets count UTF-16 code units (read at the code points they
    mean)."""
    entities = []
    for region in regions:
        start, end = region.get('start'), region.get('end')
        utf16 = None if _stands_in(region, text) else _utf16_span(region, text)
        if utf16:
            start, end = utf16
            notes = notes + [UTF16_NOTE]
        entities += [dict(start=start, end=end, type=label, text=region.get('text'))
                     for label in listed(region['labels'])]
    notes = notes + [NO_LABEL_NOTE for region in regions if not listed(region['labels'])]
    return {'text': text, 'id': record.get('id'), 'entities': entities, NOTES: notes}


def _code_points(text, units):
    """The code-point position in ``text`` of its UTF-16 code unit ``units`` (None where none
    starts there)."""
    count = 0
    for position, char in enumerate(text):
        if count == units:
            return position
        count += 2 if ord(char) > 0xffff else 1
    return len(text) if count == units else None


def _utf16_span(region, text):
    """``region``'s code-point ``(start, end)`` in ``text`` where its text stands there with its
    offsets read as UTF-16 code units (JavaScript's string positions, which some Label Studio
    versions export), else None."""
    start, end = region.get('start'), region.get('end')
    if not (isinstance(start, int) and isinstance(end, int)) or text.isascii():
        return None
    start, end = _code_points(text, start), _code_points(text, end)
    if None in (start, end) or text[start:end] != region.get('text'):
        return None
    return start, end


def _regions(value):
    """True for a JSON-MIN row's value that is its regions: a list of labelled spans."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(region, dict) and 'labels' in region and 'start' in region
                    for region in value))


def _task_text(data, regions, path, number):
    """The text a task's ``data`` holds: its ``"text"``, else its one string, else the one
    string every region's text stands in at its offsets; an error naming the strings where no
    one is the text."""
    strings = {key: value for key, value in data.items() if isinstance(value, str)}
    if 'text' in strings:
        return strings['text']
    if len(strings) == 1:
        return next(iter(strings.values()))
    fitting = [value for value in strings.values()
               if regions and all(_stands_in(region, value) for region in regions)]
    if len(fitting) == 1:
        return fitting[0]
    found = ', '.join(f'"{key}"' for key in strings) or 'none'
    raise DataFormatError(path, number, f'a Label Studio task whose text cannot be told: its data '
                                        f'holds no "text", and these strings: {echo(found)}; '
                                        'name the text "text" in the labelling config ($text)')


def _stands_in(region, text):
    start, end = region.get('start'), region.get('end')
    return (isinstance(start, int) and isinstance(end, int)
            and text[start:end] == region.get('text'))
