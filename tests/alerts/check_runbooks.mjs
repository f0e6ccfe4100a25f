// Every alert of alerts/stallwatch.rules.yml has summary, description and a runbook_url of
// docs/runbooks/<alert>.md, and that file exists (and no runbook is orphaned). Run from the
// repository root: node tests/alerts/check_runbooks.mjs
import { existsSync, readdirSync, readFileSync } from 'node:fs';

const URL_PREFIX = 'https://github.com/stallwatch/stallwatch/blob/main/';
const text = readFileSync('alerts/stallwatch.rules.yml', 'utf8');
const blocks = text.split(/^\s*- (?=alert:|record:)/m).filter((b) => b.startsWith('alert:'));
const problems = [];
const alerts = [];
for (const b of blocks) {
  const name = /^alert:\s*(\S+)/.exec(b)[1];
  alerts.push(name);
  for (const key of ['summary', 'description', 'runbook_url'])
    if (!new RegExp(`^\\s+${key}:`, 'm').test(b)) problems.push(`${name}: no ${key} annotation`);
  const url = /^\s+runbook_url:\s*(\S+)/m.exec(b)?.[1];
  const want = `${URL_PREFIX}docs/runbooks/${name}.md`;
  if (url && url !== want) problems.push(`${name}: runbook_url ${url}, expected ${want}`);
  if (!existsSync(`docs/runbooks/${name}.md`)) problems.push(`${name}: docs/runbooks/${name}.md missing`);
  if (!/^\s+severity:\s*(critical|warning)\s*$/m.test(b)) problems.push(`${name}: severity label not critical or warning`);
}
for (const f of readdirSync('docs/runbooks'))
  if (f.endsWith('.md') && !alerts.includes(f.slice(0, -3))) problems.push(`docs/runbooks/${f}: no such alert`);
if (alerts.length === 0) problems.push('no alert found in alerts/stallwatch.rules.yml');
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(`${alerts.length} alerts, each with summary, description and an existing runbook`);
