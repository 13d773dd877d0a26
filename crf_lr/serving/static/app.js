// The page of python -m crf_lr.serve: no build step, no network beyond this server.
'use strict';
const PALETTE = ['#7aecec', '#feca74', '#aa9cfc', '#bfeeb7', '#ff9561', '#ffeb80', '#c887fb',
                 '#9cc9cc', '#ff8197', '#e4e7d2', '#bfe1d9', '#f0b8d0'];
const EXAMPLES = {ner: '中共中央总书记江泽民在北京人民大会堂发表新年讲话，祝贺香港特别行政区成立。',
                  segmentation: '今天天气很好，我们去北京大学看看。'};
const $ = (id) => document.getElementById(id);
let card = null;
const colours = {};

function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  Object.entries(attributes || {}).forEach(([k, v]) => {
    if (k === 'style') Object.assign(node.style, v); else node.setAttribute(k, v);
  });
  children.forEach((child) => node.append(child));
  return node;
}

async function call(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function showCard() {
  const dev = card.dev == null ? 'n/a' : `${card.metric} ${Number(card.dev).toFixed(4)}` +
    (card.best_epoch == null ? '' : ` (epoch ${card.best_epoch})`);
  $('summary').textContent = `${card.task === 'ner' ? 'Named entities' : 'Word segmentation'}` +
    ` · ${card.encoder || "encoder n/a"} · ${card.head} head · ${card.scheme} · ${dev}`;
  const rows = [['task', card.task], ['encoder', card.encoder || 'n/a'], ['head', card.head],
    ['scheme', card.scheme], ['labels', card.labels.join('  ')], ['units', card.units],
    ['window', `${card.maxlen} tokens`], ['dev score', dev], ['trained', card.trained || 'n/a'],
    ['training command', card.command], ['model folder', card.model_dir],
    ['request limits', `${card.limits.max_texts} texts, ${card.limits.max_chars} characters, ` +
     `${card.limits.max_body_bytes} bytes`]].filter(([, value]) => value != null);
  rows.forEach(([name, value]) => $('card').append(element('dt', {}, name),
    element('dd', {}, name === 'training command' ? element('code', {}, value) : value)));
  card.types.forEach((type, k) => {
    colours[type] = PALETTE[k % PALETTE.length];
    $('legend').append(element('span', {class: 'chip', 'data-type': type,
                                        style: {background: colours[type]}}, type));
  });
  $('text').value = EXAMPLES[card.task];
}

function confidence(value) {
  return value == null ? '' : ` ${Number(value).toFixed(2)}`;
}

// The probability of the line's decoded path, from what the record holds: its log (exact when
// the probability itself rounds to 0) or the probability.
function pathProbability(result) {
  const log = result.path_log_probability;
  if (log != null) return Math.exp(log) > 0 ? Math.exp(log).toPrecision(3) : `e^${log.toFixed(1)}`;
  return result.path_probability == null ? null : Number(result.path_probability).toPrecision(3);
}

// Offsets are UTF-16 units (the request asks for them), as String.slice counts.
function showEntities(text, entities) {
  const output = $('output');
  output.replaceChildren();
  let at = 0;
  entities.forEach((entity) => {
    if (entity.start < at) return;                       // nested spans: the outer one shows
    output.append(text.slice(at, entity.start));
    const mention = Array.from(text.slice(entity.start, entity.end));
    const hover = entity.type + (entity.confidence == null ? '' :
      ` · confidence ${Number(entity.confidence).toFixed(3)}`);
    // the last character and the chip wrap as one: the chip stays beside its entity
    const tail = element('span', {class: 'tail'}, mention.pop() || '',
                         element('span', {class: 'label'},
                                 entity.type + confidence(entity.confidence)));
    output.append(element('mark', {class: 'entity', 'data-type': entity.type, title: hover,
                                   'data-confidence': entity.confidence ?? '',
                                   style: {background: colours[entity.type] || '#ddd'}},
                          mention.join(''), tail));
    at = entity.end;
  });
  output.append(text.slice(at));
}

function showWords(words) {
  $('output').replaceChildren(...words.map((word) => element('span', {class: 'word'}, word)));
}

async function analyse(event) {
  event.preventDefault();
  const text = $('text').value;
  $('run').disabled = true;
  $('status').className = '';
  $('status').textContent = 'running…';
  const began = performance.now();
  try {
    const body = await call('/v1/predict', {
      method: 'POST', body: JSON.stringify({texts: [text], offsets: 'utf16'}),
      headers: {'Content-Type': 'application/json'}});
    const result = body.results[0];
    if (result.words) showWords(result.words); else showEntities(text, result.entities);
    const count = result.words ? `${result.words.length} words` :
      `${result.entities.length} entities`;
    const path = pathProbability(result);
    $('path').textContent = path == null ? '' : `path probability ${path}`;
    $('status').textContent = `${count} in ${Math.round(performance.now() - began)} ms`;
  } catch (error) {
    $('status').className = 'error';
    $('status').textContent = error.message;
  } finally {
    $('run').disabled = false;
  }
}

function heat(value, spread) {                  // blue (negative) - white - red (positive)
  const t = Math.max(-1, Math.min(1, value / spread));
  const fade = Math.round(255 * (1 - Math.abs(t)));
  return t < 0 ? `rgb(${fade}, ${fade}, 255)` : `rgb(255, ${fade}, ${fade})`;
}

function showTransitions(matrix) {
  const labels = matrix.labels;
  const possible = matrix.transitions.flat().filter((_, k) =>
    matrix.allowed[Math.floor(k / labels.length)][k % labels.length]);
  const spread = Math.max(1e-9, ...possible.map(Math.abs));
  const table = element('table', {class: 'heatmap'},
    element('tr', {}, element('th', {}, 'from \\ to'), ...labels.map((l) => element('th', {}, l))));
  labels.forEach((from, i) => {
    const row = element('tr', {}, element('th', {}, from));
    labels.forEach((to, j) => {
      const value = matrix.transitions[i][j];
      const allowed = matrix.allowed[i][j];
      row.append(allowed ?
        element('td', {class: 'possible', title: `${from} → ${to}: ${value.toFixed(3)}`,
                       style: {background: heat(value, spread),
                               color: Math.abs(value) > 0.6 * spread ? '#fff' : '#222'}},
                value.toFixed(1)) :
        element('td', {class: 'impossible',
                       title: `${from} → ${to}: impossible in the ${matrix.scheme} scheme ` +
                              `(learned ${value.toFixed(3)}, never used)`}, '×'));
    });
    table.append(row);
  });
  $('transitions').replaceChildren(table);
  $('transitions-section').hidden = false;
}

async function start() {
  $('form').addEventListener('submit', analyse);
  try {
    card = await call('/v1/model');
    showCard();
    if (card.has_transitions) showTransitions(await call('/v1/transitions'));
  } catch (error) {
    $('status').className = 'error';
    $('status').textContent = `cannot read the model card: ${error.message}`;
  }
}

start();
