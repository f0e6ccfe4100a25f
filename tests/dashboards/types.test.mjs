// Type-checks every dashboard against the Dashboard type of @grafana/schema (pinned in
// package-lock.json) with tsc: one generated file per dashboard,
//   import type { Dashboard } from '@grafana/schema';
//   export const dashboard = { ...the JSON... } satisfies AsJson<Dashboard>;
// `satisfies` types the literal in context, so literal unions ('query' | 'datasource' | ...),
// numeric enums (graphTooltip, hide, refresh, sort) and excess properties are all checked; a
// JSON import (resolveJsonModule) would widen every string to string and check none of that.
// AsJson<T> is Dashboard with its *string* enums (FieldColorModeId, ThresholdsMode, ...) turned
// into the union of their values (`${E}`): TypeScript never accepts a string literal for a
// string enum, yet the JSON Grafana saves holds exactly those strings ("thresholds").
// Known-bad copies (mutants) go through the same tsc run and must each fail where expected,
// so a check that stopped checking (an `any` creeping in, the package not resolving) is caught.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { EXPECTED, dashboardFiles, loadDashboard, requireNodeModules } from './lib.mjs';

function tsSource(dash) {
  return (
    "import type { Dashboard } from '@grafana/schema';\n" +
    'type AsJson<T> = T extends string ? `${T}` : T extends ReadonlyArray<infer U> ? Array<AsJson<U>>\n' +
    '  : T extends object ? { [K in keyof T]: AsJson<T[K]> } : T;\n' +
    `export const dashboard = ${JSON.stringify(dash, null, 2)} satisfies AsJson<Dashboard>;\n`
  );
}

// Each mutant breaks one field of the overview; tsc must report an error in its file.
const MUTANTS = {
  refresh_number: (d) => {
    d.refresh = 5;
  },
  gridpos_string: (d) => {
    d.panels[1].gridPos = '0,0,6,4';
  },
  variable_type: (d) => {
    d.templating.list[1].type = 'querry';
  },
  graph_tooltip_out_of_enum: (d) => {
    d.graphTooltip = 7;
  },
  unknown_dashboard_field: (d) => {
    d.refreshh = '30s';
  },
  color_mode_unknown: (d) => {
    d.panels[1].fieldConfig.defaults.color.mode = 'rainbow';
  },
  panel_id_string: (d) => {
    d.panels[1].id = '2';
  },
};

test('dashboards satisfy @grafana/schema Dashboard (tsc --noEmit)', () => {
  const nm = requireNodeModules();
  assert.deepEqual(dashboardFiles(), EXPECTED);
  const dir = mkdtempSync(join(tmpdir(), 'stallwatch-dash-tsc-'));
  try {
    symlinkSync(nm, join(dir, 'node_modules'), 'dir');
    const files = [];
    for (const f of EXPECTED) {
      const name = f.replace(/\.json$/, '.ts');
      writeFileSync(join(dir, name), tsSource(loadDashboard(f)));
      files.push(name);
    }
    for (const [name, mutate] of Object.entries(MUTANTS)) {
      const d = loadDashboard('stallwatch-overview.json');
      mutate(d);
      writeFileSync(join(dir, `mutant_${name}.ts`), tsSource(d));
      files.push(`mutant_${name}.ts`);
    }
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'es2022',
          module: 'esnext',
          moduleResolution: 'bundler',
          skipLibCheck: true,
          types: [],
        },
        files,
      }),
    );
    const r = spawnSync(process.execPath, [join(nm, 'typescript', 'bin', 'tsc'), '-p', dir, '--pretty', 'false'], {
      encoding: 'utf8',
      cwd: dir,
    });
    const out = `${r.stdout}${r.stderr}`;
    const errors = out.split('\n').filter((l) => /error TS\d+/.test(l));
    const byFile = new Map();
    for (const l of errors) {
      const f = l.split('(')[0];
      byFile.set(f, [...(byFile.get(f) ?? []), l]);
    }
    for (const f of EXPECTED.map((x) => x.replace(/\.json$/, '.ts'))) {
      assert.deepEqual(byFile.get(f) ?? [], [], `${f} does not satisfy Dashboard:\n${(byFile.get(f) ?? []).join('\n')}`);
    }
    for (const name of Object.keys(MUTANTS)) {
      const f = `mutant_${name}.ts`;
      assert.ok(byFile.has(f), `tsc accepted the mutant ${name}: the type check is not checking\n${out.slice(-3000)}`);
    }
    const stray = [...byFile.keys()].filter((f) => !files.includes(f));
    assert.deepEqual(stray, [], `tsc errors outside the generated files:\n${out.slice(-3000)}`);
    assert.notEqual(r.status, 0, 'tsc exited 0 although the mutants are wrong');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
