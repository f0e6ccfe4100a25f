// Prometheus side of the e2e tests: the text exposition of /metrics parsed into families, and
// the HTTP GETs of /metrics and /healthz.

function parseLabels(s) {
  const labels = {};
  const re = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/gy;
  let m;
  while ((m = re.exec(s)) !== null) {
    labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    if (re.lastIndex >= s.length) break;
  }
  return labels;
}

function parseValue(v) {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  if (v === 'NaN') return NaN;
  return Number(v);
}

// Returns Map name -> { name, type, help, samples: [{ name, labels, value }] }; samples of a
// histogram (_bucket, _sum, _count) belong to the family they follow.
export function parsePrometheus(text) {
  const families = new Map();
  const family = (name) => {
    if (!families.has(name)) families.set(name, { name, type: 'untyped', help: '', samples: [] });
    return families.get(name);
  };
  let current = null;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let m;
    if ((m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line))) {
      current = family(m[2]);
      if (m[1] === 'TYPE') current.type = m[3];
      else current.help = m[3];
      continue;
    }
    if (line.startsWith('#')) continue;
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$/.exec(line);
    if (!m) throw new Error(`unparsable exposition line: ${line}`);
    const name = m[1];
    let owner = current;
    if (!owner || !(name === owner.name || name.startsWith(`${owner.name}_`))) owner = family(name);
    owner.samples.push({ name, labels: m[3] ? parseLabels(m[3]) : {}, value: parseValue(m[4]) });
  }
  return families;
}

// The first sample of family `name` whose labels include `labels`.
export function promValue(families, name, labels = {}) {
  const base = name.replace(/_(bucket|sum|count)$/, '');
  const fam = families.get(name) || families.get(base);
  if (!fam) return undefined;
  const s = fam.samples.find(
    (x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v),
  );
  return s ? s.value : undefined;
}

// Sum of every sample of `name` whose labels include `labels` (e.g. a counter over reasons).
export function promSum(families, name, labels = {}) {
  const base = name.replace(/_(bucket|sum|count)$/, '');
  const fam = families.get(name) || families.get(base);
  if (!fam) return 0;
  return fam.samples
    .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
    .reduce((a, x) => a + x.value, 0);
}

export async function httpGet(url, { timeoutMs = 5000 } = {}) {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  return { status: res.status, text: await res.text() };
}

export async function scrape(baseUrl, opts) {
  const { status, text } = await httpGet(`${baseUrl}/metrics`, opts);
  if (status !== 200) throw new Error(`GET ${baseUrl}/metrics: HTTP ${status}`);
  return { text, families: parsePrometheus(text), time: Date.now() };
}
